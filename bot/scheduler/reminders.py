"""Reminders the user asks for: stored in `workspace/reminders.json`, fired by the bot's scheduler.

A reminder is due at an absolute time, after a delay, or on a cron schedule in the user's time
zone. It is delivered to the chat that asked, as a normal bot message. Delivery is at most once: a
reminder is marked fired on disk before it is sent, so a crash can never make it arrive twice; one
whose time passed while the bot was down is delivered late, once, with a note saying so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path

from pydantic import Field, ValidationError

from bot.cron import InvalidCron, cron_trigger
from bot.domain.model import CamelModel, utc_now
from bot.storage.files import read_text_sync, write_atomic

log = logging.getLogger(__name__)

Deliver = Callable[[str, str, str], Awaitable[None]]  # channel type, chat id, text

_DELAY_PART = re.compile(r"(\d+)\s*(d|h|m|s)", re.IGNORECASE)
_DELAY_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


class InvalidReminder(ValueError):
    """The time, delay or cron expression given for a reminder cannot be used; the message says why."""


class Reminder(CamelModel):
    """One reminder as stored. `due_at` is the next time it fires (UTC); `cron` repeats it."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:8])
    session_id: str
    channel_type: str
    chat_id: str
    text: str
    created_at: datetime = Field(default_factory=utc_now)
    due_at: datetime
    cron: str | None = None
    timezone: str = "UTC"
    fired_count: int = 0


def parse_delay(text: str) -> timedelta:
    """`"90m"`, `"1h30m"`, `"2d"` as a duration."""
    parts = _DELAY_PART.findall(text)
    if not parts or _DELAY_PART.sub("", text).strip():
        raise InvalidReminder(f"{text!r} is not a delay like '45m', '2h30m' or '1d'")
    delay = timedelta()
    for amount, unit in parts:
        delay += timedelta(**{_DELAY_UNITS[unit.lower()]: int(amount)})
    if delay <= timedelta():
        raise InvalidReminder("the delay must be positive")
    return delay


def next_cron_time(expression: str, zone: tzinfo, after: datetime) -> datetime:
    """The first time at or after `after` that the 5-field cron `expression` names, in UTC."""
    try:
        trigger = cron_trigger(expression, zone)
    except InvalidCron as error:
        raise InvalidReminder(str(error)) from error
    fire_time: datetime | None = trigger.get_next_fire_time(None, after)
    if fire_time is None:
        raise InvalidReminder(f"{expression!r} never fires")
    return fire_time.astimezone(UTC)


class ReminderService:
    """Keeps the reminders and delivers the ones that are due."""

    def __init__(self, path: Path, zone: tzinfo, zone_name: str) -> None:
        self._path = path
        self._zone = zone
        self._zone_name = zone_name
        self._reminders = self._load()
        self._lock = asyncio.Lock()
        self._deliver: Deliver | None = None
        self._channel_types: set[str] = set()

    def connect(self, deliver: Deliver, channel_types: set[str]) -> None:
        """Where due reminders go, and which channels are running; set once the channels are."""
        self._deliver = deliver
        self._channel_types = channel_types

    def _load(self) -> dict[str, Reminder]:
        text = read_text_sync(self._path)
        if not text:
            return {}
        try:
            records = json.loads(text)
            reminders = [Reminder.model_validate(record) for record in records]
        except (json.JSONDecodeError, ValidationError, TypeError) as error:
            log.error("[Scheduler] %s is unreadable (%s); starting with no reminders", self._path, error)
            return {}
        return {reminder.id: reminder for reminder in reminders}

    async def _save(self) -> None:
        records = [reminder.to_json_dict() for reminder in self._reminders.values()]
        await write_atomic(self._path, json.dumps(records, ensure_ascii=False, indent=1).encode("utf-8"))

    async def add(
        self,
        session_id: str,
        channel_type: str,
        chat_id: str,
        text: str,
        *,
        at: str | None = None,
        delay: str | None = None,
        cron: str | None = None,
    ) -> Reminder:
        """Schedule a reminder; exactly one of `at` (ISO time, local unless it has an offset), `delay`, `cron`."""
        if sum(value is not None for value in (at, delay, cron)) != 1:
            raise InvalidReminder("give exactly one of: an absolute time, a delay, or a cron expression")
        now = utc_now()
        if at is not None:
            due = self._parse_time(at)
            if due <= now:
                raise InvalidReminder(f"{at} is in the past")
        elif delay is not None:
            due = now + parse_delay(delay)
        else:
            assert cron is not None
            due = next_cron_time(cron, self._zone, now)
        reminder = Reminder(
            session_id=session_id, channel_type=channel_type, chat_id=chat_id, text=text.strip(),
            due_at=due, cron=cron, timezone=self._zone_name,
        )  # fmt: skip
        async with self._lock:
            self._reminders[reminder.id] = reminder
            await self._save()
        log.info("[Scheduler] Reminder %s for %s due %s", reminder.id, session_id, due.isoformat())
        return reminder

    def pending(self, session_id: str) -> list[Reminder]:
        """The chat's reminders that will still fire, soonest first."""
        chosen = [r for r in self._reminders.values() if r.session_id == session_id]
        return sorted(chosen, key=lambda reminder: reminder.due_at)

    async def cancel(self, session_id: str, reminder_id: str) -> bool:
        async with self._lock:
            reminder = self._reminders.get(reminder_id)
            if reminder is None or reminder.session_id != session_id:
                return False
            del self._reminders[reminder_id]
            await self._save()
        return True

    def describe(self, reminder: Reminder) -> str:
        local = reminder.due_at.astimezone(self._zone).strftime("%Y-%m-%d %H:%M")
        repeat = f", repeats '{reminder.cron}'" if reminder.cron else ""
        return f"[{reminder.id}] {local} ({self._zone_name}){repeat}: {reminder.text}"

    async def fire_due(self, now: datetime | None = None, late_after: timedelta = timedelta(minutes=2)) -> int:
        """Deliver every reminder that is due; returns how many were sent. Run by the scheduler."""
        if self._deliver is None:
            return 0
        moment = now or utc_now()
        sent = 0
        # A reminder for a channel that is not running waits for it (and then arrives late, once).
        due = [r for r in self._reminders.values() if r.due_at <= moment and r.channel_type in self._channel_types]
        for reminder in due:
            late = moment - reminder.due_at > late_after
            due_at = reminder.due_at
            async with self._lock:
                self._advance(reminder, moment)
                await self._save()  # fired on disk before it is sent: never twice, whatever happens next
            note = self._late_note(due_at) if late else ""
            try:
                await self._deliver(reminder.channel_type, reminder.chat_id, f"⏰ Reminder: {reminder.text}{note}")
                sent += 1
            except Exception as error:
                log.error("[Scheduler] Reminder %s could not be delivered: %s", reminder.id, error)
        return sent

    def _advance(self, reminder: Reminder, moment: datetime) -> None:
        """A repeating reminder moves to its next time; a one-off one is gone."""
        reminder.fired_count += 1
        if reminder.cron:
            # Strictly after the time just fired, which the cron expression itself also matches.
            reminder.due_at = next_cron_time(
                reminder.cron, self._zone, max(moment, reminder.due_at) + timedelta(seconds=1)
            )
        else:
            del self._reminders[reminder.id]

    def _late_note(self, due_at: datetime) -> str:
        local = due_at.astimezone(self._zone).strftime("%Y-%m-%d %H:%M")
        return f"\n(This was due at {local}; I was offline then, so it comes late.)"

    def _parse_time(self, text: str) -> datetime:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError as error:
            raise InvalidReminder(f"{text!r} is not a time like 2026-12-24T18:00") from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self._zone)
        return moment.astimezone(UTC)

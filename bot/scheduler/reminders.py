"""Reminders the user asks for: kept in `workspace/reminders.json` (or PostgreSQL), fired by the bot's scheduler.

A reminder is due at an absolute time, after a delay, or on a cron schedule in the user's time
zone. It is delivered to the chat that asked, as a normal bot message. Delivery is at most once: a
reminder is marked fired in its store before it is sent (`ReminderStore.claim_due`), so a crash can
never make it arrive twice; one whose time passed while the bot was down is delivered late, once, with
a note saying so.

A chat that refuses the bot's messages for good (`ChatUnreachable`: the bot blocked or removed) pauses a
reminder it refused, kept in the store: a repeating one tried at every time would only fail. The chat's next
message to the bot resumes them (a repeating one from its next time) and tells the chat what was missed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, tzinfo

from bot.channels.base import ChatUnreachable
from bot.cron import InvalidCron, cron_trigger
from bot.domain.model import utc_now
from bot.scheduler.reminder_store import Reminder, ReminderStore

log = logging.getLogger(__name__)

Deliver = Callable[[str, str, str], Awaitable[None]]  # channel type, chat id, text

_DELAY_PART = re.compile(r"(\d+)\s*(d|h|m|s)", re.IGNORECASE)
_DELAY_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


class InvalidReminder(ValueError):
    """The time, delay or cron expression given for a reminder cannot be used; the message says why."""


def parse_delay(text: str) -> timedelta:
    """`"90m"`, `"1h30m"`, `"2d"` as a duration."""
    parts = _DELAY_PART.findall(text)
    if not parts or _DELAY_PART.sub("", text).strip():
        raise InvalidReminder(f"{text!r} is not a delay like '45m', '2h30m' or '1d'")
    delay = timedelta()
    try:
        for amount, unit in parts:
            delay += timedelta(**{_DELAY_UNITS[unit.lower()]: int(amount)})
    except OverflowError as error:
        raise InvalidReminder(f"{text!r} is further ahead than a reminder can be") from error
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

    def __init__(self, store: ReminderStore, zone: tzinfo, zone_name: str) -> None:
        self._store = store
        self._zone = zone
        self._zone_name = zone_name
        self._deliver: Deliver | None = None
        self._channel_types: set[str] = set()

    def connect(self, deliver: Deliver, channel_types: set[str]) -> None:
        """Where due reminders go, and which channels are running; set once the channels are."""
        self._deliver = deliver
        self._channel_types = channel_types

    async def load(self) -> None:
        """Read the reminders kept (at start, before the first is fired)."""
        await self._store.load()

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
            try:
                due = now + parse_delay(delay)
            except OverflowError as error:
                raise InvalidReminder(f"{delay!r} is further ahead than a reminder can be") from error
        else:
            assert cron is not None
            due = next_cron_time(cron, self._zone, now)
        reminder = Reminder(
            session_id=session_id, channel_type=channel_type, chat_id=chat_id, text=text.strip(),
            due_at=due, cron=cron, timezone=self._zone_name,
        )  # fmt: skip
        await self._store.put(reminder)
        log.info("[Scheduler] Reminder %s for %s due %s", reminder.id, session_id, due.isoformat())
        return reminder

    async def pending(self, session_id: str) -> list[Reminder]:
        """The chat's reminders that will still fire, soonest first."""
        return await self._store.of_session(session_id)

    async def cancel(self, session_id: str, reminder_id: str) -> bool:
        return await self._store.remove(session_id, reminder_id)

    def describe(self, reminder: Reminder) -> str:
        local = self._local(reminder.due_at)
        repeat = f", repeats '{reminder.cron}'" if reminder.cron else ""
        paused = ""
        if reminder.paused_at is not None:
            since = self._local(reminder.paused_at)
            paused = f" (paused since {since}: the chat took no message from me; a message here resumes it)"
        return f"[{reminder.id}] {local} ({self._zone_name}){repeat}: {reminder.text}{paused}"

    async def resume(self, session_id: str) -> list[Reminder]:
        """The chat wrote to the bot, so it takes messages again: its paused reminders go on (a repeating one from
        its next time), and the chat is told which; a one-off one whose time passed meanwhile is told now, and is
        done. Returns the reminders that go on."""
        paused = [reminder for reminder in await self._store.of_session(session_id) if reminder.paused_at is not None]
        going_on: list[Reminder] = []
        missed: list[Reminder] = []
        now = utc_now()
        for reminder in paused:
            due = reminder.due_at
            if reminder.cron:
                try:
                    due = next_cron_time(reminder.cron, self._zone, now)
                except InvalidReminder:  # a hand edit's date that never comes: this was its last time
                    pass
            if due <= now:
                if await self._store.remove(session_id, reminder.id):  # gone before it is told: at most once
                    missed.append(reminder)
                continue
            resumed = reminder.model_copy(update={"due_at": due, "paused_at": None, "paused_because": None})
            await self._store.put(resumed)
            going_on.append(resumed)
        if not paused:
            return []
        log.info("[Scheduler] %s wrote to the bot: %d paused reminders go on, %d missed ones are told now",
                 session_id, len(going_on), len(missed))  # fmt: skip
        if self._deliver is not None:
            lines = ["While this chat took no messages from me, your reminders were paused."]
            if missed:
                lines.append("Due meanwhile:")
                lines += [f"⏰ {reminder.text} (due {self._local(reminder.due_at)})" for reminder in missed]
            if going_on:
                lines.append("They go on:")
                lines += [self.describe(reminder) for reminder in going_on]
            await self._deliver(paused[0].channel_type, paused[0].chat_id, "\n".join(lines))
        return going_on

    async def fire_due(self, now: datetime | None = None, late_after: timedelta = timedelta(minutes=2)) -> int:
        """Deliver every reminder that is due; returns how many were sent. Run by the scheduler."""
        if self._deliver is None:
            return 0
        moment = now or utc_now()
        sent = 0
        # A reminder for a channel that is not running waits for it (and then arrives late, once).
        due = await self._store.claim_due(moment, self._channel_types, lambda due: self._advance(due, moment))
        for position, reminder in enumerate(due):
            late = moment - reminder.due_at > late_after
            due_at = reminder.due_at
            note = self._late_note(due_at) if late else ""
            try:
                await self._deliver(reminder.channel_type, reminder.chat_id, f"⏰ Reminder: {reminder.text}{note}")
                sent += 1
            except asyncio.CancelledError:
                await self._put_back(reminder, due[position + 1 :])
                raise
            except ChatUnreachable as error:
                await self._pause(reminder, moment, str(error))
            except Exception as error:
                log.error("[Scheduler] Reminder %s could not be delivered: %s", reminder.id, error)
        return sent

    async def _pause(self, reminder: Reminder, moment: datetime, reason: str) -> None:
        """The chat refuses the bot's messages: the reminder, which it certainly did not get, is kept, paused (a
        repeating one at its next time), until the chat writes again; logged once, here."""
        following = self._advance(reminder, moment)
        kept = reminder if following is None else following.model_copy(update={"fired_count": reminder.fired_count})
        try:
            await self._store.put(kept.model_copy(update={"paused_at": moment, "paused_because": reason}))
        except OSError as error:
            log.error("[Scheduler] Reminder %s, refused by its chat (%s), could not be kept: %s", reminder.id,
                      reason, error)  # fmt: skip
            return
        log.warning(
            "[Scheduler] Reminder %s is paused: chat %s refuses the bot's messages (%s). It is kept, and resumes "
            "when the chat writes to the bot again",
            reminder.id, reminder.chat_id, reason,
        )  # fmt: skip

    async def _put_back(self, interrupted: Reminder, unsent: list[Reminder]) -> None:
        """A stop in the middle of a batch (many reminders due at once, a chat's flood control): the ones not yet
        sent are kept as they were, to come late, once, after the start; the one being sent may have arrived."""
        log.warning(
            "[Scheduler] Reminder %s was being sent when the bot stopped; it may not have arrived", interrupted.id
        )
        for reminder in unsent:
            try:
                await self._store.put(reminder)
            except OSError as error:
                log.error(
                    "[Scheduler] Reminder %s, not sent before the stop, could not be kept: %s", reminder.id, error
                )
        if unsent:
            log.info("[Scheduler] %d reminders not sent before the stop are kept for the start", len(unsent))

    def _advance(self, reminder: Reminder, moment: datetime) -> Reminder | None:
        """A repeating reminder moved to its next time (a copy); None for a one-off one, which is gone."""
        if not reminder.cron:
            return None
        # Strictly after the time just fired, which the cron expression itself also matches.
        try:
            following = next_cron_time(reminder.cron, self._zone, max(moment, reminder.due_at) + timedelta(seconds=1))
        except InvalidReminder as error:  # a hand edit's date that never comes ('0 9 31 2 *'): this is the last time
            log.error("[Scheduler] Reminder %s repeats no more: %s", reminder.id, error)
            return None
        return reminder.model_copy(update={"due_at": following, "fired_count": reminder.fired_count + 1})

    def _late_note(self, due_at: datetime) -> str:
        return f"\n(This was due at {self._local(due_at)}; I was offline then, so it comes late.)"

    def _local(self, moment: datetime) -> str:
        return moment.astimezone(self._zone).strftime("%Y-%m-%d %H:%M")

    def _parse_time(self, text: str) -> datetime:
        if _DATE_ONLY.fullmatch(text.strip()):  # midnight is seldom what "remind me on Friday" means
            raise InvalidReminder(f"{text!r} has no time of day; give one, like {text.strip()}T09:00")
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError as error:
            raise InvalidReminder(f"{text!r} is not a time like 2026-12-24T18:00") from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self._zone)
        try:
            return moment.astimezone(UTC)
        except OverflowError as error:
            raise InvalidReminder(f"{text!r} is further ahead than a reminder can be") from error

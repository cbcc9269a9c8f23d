"""Where reminders are kept: the `ReminderStore` interface, `reminders.json`, and PostgreSQL's `reminders`.

`ReminderService` decides (times, cron, what a late one says); a store keeps the reminders and hands
out the due ones by `claim_due`, which records each as fired (a one-off one gone, a repeating one moved
to its next time by `advance`) before it returns them: a reminder is handed out once, and with several
processes sharing the database, to one of them only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationError, model_validator

from bot.cron import cron_trigger
from bot.database.connection import Database
from bot.domain.model import CamelModel, utc_now
from bot.storage.files import put_aside_sync, read_text_sync, write_atomic

log = logging.getLogger(__name__)


class Reminder(CamelModel):
    """One reminder as stored. `due_at` is the next time it fires (UTC); `cron` repeats it. A repeating one
    whose chat refused the bot's messages is paused (`paused_at`, with the chat's reason): it fires no more
    until the chat writes to the bot again."""

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
    paused_at: datetime | None = None
    paused_because: str | None = None

    @model_validator(mode="after")
    def _usable(self) -> Reminder:
        """What a hand edit may leave that would stop every reminder, not this one only: a time written
        without an offset (read in the reminder's own zone, as a person editing the file means it), and a
        cron expression that does not parse (refused, so the reminder is skipped as unreadable)."""
        zone = _zone(self.timezone)
        if self.due_at.tzinfo is None:
            self.due_at = self.due_at.replace(tzinfo=zone).astimezone(UTC)
        if self.created_at.tzinfo is None:
            self.created_at = self.created_at.replace(tzinfo=zone).astimezone(UTC)
        if self.cron is not None:
            cron_trigger(self.cron, zone)
        return self


def _zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


# A due reminder moved to its next time (a copy), or None when it fires no more.
Advance = Callable[[Reminder], Reminder | None]


class ReminderStore(Protocol):
    """The reminders, kept. A failed write raises `OSError`."""

    async def load(self) -> None:
        """Read what is kept (at start)."""
        ...

    async def of_session(self, session_id: str) -> list[Reminder]:
        """The chat's reminders, soonest first."""
        ...

    async def put(self, reminder: Reminder) -> None: ...

    async def remove(self, session_id: str, reminder_id: str) -> bool:
        """False when the chat has no such reminder."""
        ...

    async def claim_due(self, moment: datetime, channel_types: set[str], advance: Advance) -> list[Reminder]:
        """The reminders due at `moment` on these channels (paused ones aside), as they were, each recorded as
        fired first."""
        ...


class ReminderFile:
    """`reminders.json`: every reminder in one JSON list, rewritten atomically on each change.

    A person may edit the file. An entry that cannot be read (a slip of the edit) is skipped, logged, and
    written back as it is with every change, so fixing it brings it back; a file that is no JSON list at
    all is moved aside as `reminders.json.corrupt-<time>`, and the bot starts with no reminders."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._reminders: dict[str, Reminder] = {}
        self._unreadable: list[Any] = []
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        self._reminders, self._unreadable = {}, []
        text = await asyncio.to_thread(read_text_sync, self._path)
        if not text or not text.strip():
            return
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            records, problem = None, f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        else:
            problem = "not a JSON list of reminders"
        if not isinstance(records, list):
            aside = await asyncio.to_thread(put_aside_sync, self._path)
            log.error("[Scheduler] %s is %s; moved to %s, starting with no reminders", self._path, problem, aside.name)
            return
        for position, record in enumerate(records, start=1):
            try:
                reminder = Reminder.model_validate(record)
            except ValidationError as error:
                self._unreadable.append(record)
                log.error(
                    "[Scheduler] Entry %d of %s is unreadable (%s); skipped, and kept in the file as it is",
                    position, self._path, _first_problem(error),
                )  # fmt: skip
                continue
            if reminder.id in self._reminders:
                self._unreadable.append(record)
                log.error("[Scheduler] Entry %d of %s repeats the id %s; skipped, and kept in the file as it is",
                          position, self._path, reminder.id)  # fmt: skip
                continue
            self._reminders[reminder.id] = reminder

    async def everything(self) -> list[Reminder]:
        """Every reminder in the file (`bot migrate` copies them)."""
        return list(self._reminders.values())

    @property
    def unreadable(self) -> int:
        """How many entries of the file could not be read (logged at `load`, kept in the file)."""
        return len(self._unreadable)

    async def of_session(self, session_id: str) -> list[Reminder]:
        chosen = [r for r in self._reminders.values() if r.session_id == session_id]
        return sorted(chosen, key=lambda reminder: reminder.due_at)

    async def put(self, reminder: Reminder) -> None:
        async with self._lock:
            self._reminders[reminder.id] = reminder
            await self._save()

    async def remove(self, session_id: str, reminder_id: str) -> bool:
        async with self._lock:
            reminder = self._reminders.get(reminder_id)
            if reminder is None or reminder.session_id != session_id:
                return False
            del self._reminders[reminder_id]
            await self._save()
        return True

    async def claim_due(self, moment: datetime, channel_types: set[str], advance: Advance) -> list[Reminder]:
        async with self._lock:
            due = [
                r for r in self._reminders.values()
                if r.due_at <= moment and r.channel_type in channel_types and r.paused_at is None
            ]  # fmt: skip
            for reminder in due:
                following = advance(reminder)
                if following is None:
                    del self._reminders[reminder.id]
                else:
                    self._reminders[reminder.id] = following
            if due:
                await self._save()  # fired on disk before they are sent: never twice, whatever happens next
        return due

    async def _save(self) -> None:
        records = [reminder.to_json_dict() for reminder in self._reminders.values()] + self._unreadable
        await write_atomic(self._path, json.dumps(records, ensure_ascii=False, indent=1).encode("utf-8"))


class ReminderTable:
    """The `reminders` table: a due reminder is claimed by one process (`FOR UPDATE SKIP LOCKED`)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def load(self) -> None:
        return None  # read when asked: other processes add and fire reminders too

    async def of_session(self, session_id: str) -> list[Reminder]:
        rows = await self._database.fetch(
            "SELECT id, reminder FROM reminders WHERE session_id = $1 ORDER BY due_at", session_id
        )
        return [reminder for row in rows if (reminder := _reminder(row)) is not None]

    async def put(self, reminder: Reminder) -> None:
        async with self._database.transaction() as connection:
            await _upsert(connection, reminder)

    async def remove(self, session_id: str, reminder_id: str) -> bool:
        async with self._database.transaction() as connection:
            gone = await connection.fetch(
                "DELETE FROM reminders WHERE id = $1 AND session_id = $2 RETURNING id", reminder_id, session_id
            )
        return bool(gone)

    async def claim_due(self, moment: datetime, channel_types: set[str], advance: Advance) -> list[Reminder]:
        claimed: list[Reminder] = []
        async with self._database.transaction() as connection:
            rows = await connection.fetch(
                "SELECT id, reminder FROM reminders WHERE due_at <= $1 AND channel_type = ANY($2::text[])"
                " AND reminder->>'pausedAt' IS NULL ORDER BY due_at FOR UPDATE SKIP LOCKED",
                moment, sorted(channel_types),
            )  # fmt: skip
            for row in rows:
                reminder = _reminder(row)
                if reminder is None:
                    continue  # an unreadable row (a hand edit) is left as it is, never deleted
                following = advance(reminder)
                if following is None:
                    await connection.execute("DELETE FROM reminders WHERE id = $1", row["id"])
                else:
                    await _upsert(connection, following)
                claimed.append(reminder)
        return claimed


async def _upsert(connection: object, reminder: Reminder) -> None:
    await connection.execute(  # type: ignore[attr-defined]
        "INSERT INTO reminders (id, session_id, channel_type, due_at, reminder) VALUES ($1, $2, $3, $4, $5::jsonb)"
        " ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, due_at = excluded.due_at,"
        " reminder = excluded.reminder",
        reminder.id, reminder.session_id, reminder.channel_type, reminder.due_at,
        json.dumps(reminder.to_json_dict(), ensure_ascii=False),
    )  # fmt: skip


def _first_problem(error: ValidationError) -> str:
    """`dueAt: Input should be a valid datetime`, of the first thing wrong (`+ 2 more` when there are)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the entry"
    more = f" + {error.error_count() - 1} more" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _reminder(row: object) -> Reminder | None:
    try:
        return Reminder.model_validate_json(row["reminder"])  # type: ignore[index]
    except ValidationError as error:
        log.error("[Scheduler] Reminder %s is unreadable (%s); left as it is", row["id"], _first_problem(error))  # type: ignore[index]
        return None

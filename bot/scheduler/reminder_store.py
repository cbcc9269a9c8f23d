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
from datetime import datetime
from pathlib import Path
from typing import Protocol

from pydantic import Field, ValidationError

from bot.database.connection import Database
from bot.domain.model import CamelModel, utc_now
from bot.storage.files import read_text_sync, write_atomic

log = logging.getLogger(__name__)


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
        """The reminders due at `moment` on these channels, as they were, each recorded as fired first."""
        ...


class ReminderFile:
    """`reminders.json`: every reminder in one JSON list, rewritten atomically on each change."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._reminders: dict[str, Reminder] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        text = await asyncio.to_thread(read_text_sync, self._path)
        if not text:
            return
        try:
            records = json.loads(text)
            reminders = [Reminder.model_validate(record) for record in records]
        except (json.JSONDecodeError, ValidationError, TypeError) as error:
            log.error("[Scheduler] %s is unreadable (%s); starting with no reminders", self._path, error)
            return
        self._reminders = {reminder.id: reminder for reminder in reminders}

    async def everything(self) -> list[Reminder]:
        """Every reminder in the file (`bot migrate` copies them)."""
        return list(self._reminders.values())

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
            due = [r for r in self._reminders.values() if r.due_at <= moment and r.channel_type in channel_types]
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
        records = [reminder.to_json_dict() for reminder in self._reminders.values()]
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
                " ORDER BY due_at FOR UPDATE SKIP LOCKED",
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


def _reminder(row: object) -> Reminder | None:
    try:
        return Reminder.model_validate_json(row["reminder"])  # type: ignore[index]
    except ValidationError as error:
        log.error("[Scheduler] Reminder %s is unreadable (%s); left as it is", row["id"], error)  # type: ignore[index]
        return None

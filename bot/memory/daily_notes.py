"""Daily notes: one line per finished exchange in `memory/YYYY-MM-DD.md` (the format of docs/memory.md).

`[HH:mm] User: {text} | Assistant: {text}`, the user's text cut to 200 characters, the assistant's to
300, newlines replaced by spaces; the time and the day are the bot's time zone's (`Clock`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from datetime import date, datetime

from bot.memory.documents import MemoryDocuments, daily_note_name

USER_TEXT_LIMIT = 200
ASSISTANT_TEXT_LIMIT = 300
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")
_NOTE_TIME = re.compile(rb"\[\d\d:\d\d\] ")


def one_line(text: str, limit: int) -> str:
    """`text` on one line (every line break a space), cut to `limit` characters."""
    return _LINE_BREAKS.sub(" ", text)[:limit]


def format_note_line(at: datetime, user_text: str, assistant_text: str) -> str:
    return f"[{at:%H:%M}] {note_body(user_text, assistant_text)}"


def note_body(user_text: str, assistant_text: str) -> str:
    """A note line after its time: what identifies the exchange in the file."""
    return f"User: {one_line(user_text, USER_TEXT_LIMIT)} | Assistant: {one_line(assistant_text, ASSISTANT_TEXT_LIMIT)}"


class DailyNotes:
    """The daily notes of one memory scope."""

    def __init__(self, documents: MemoryDocuments) -> None:
        self._documents = documents
        # Chats sharing a scope append to the same file: a line appended while `remove_exchange` rewrites
        # the file would be lost, so the two never overlap.
        self._lock = asyncio.Lock()

    async def append(self, at: datetime, user_text: str, assistant_text: str) -> str:
        """Append the exchange to `at`'s day; returns the line written."""
        line = format_note_line(at, user_text, assistant_text)
        async with self._lock:
            await self._documents.append_line(daily_note_name(at.date()), line)
        return line

    async def remove_exchange(self, days: Iterable[date], user_text: str, assistant_text: str) -> bool:
        """Take out the newest line recording this exchange, from the first of `days` whose note has it
        (the exchange was dropped by /retry or /undo); False when none has it (the person edited it).

        The file is rewritten atomically with every other byte as it was: hand edits, blank lines and
        lines the bot cannot read stay.
        """
        body = note_body(user_text, assistant_text).encode("utf-8", "backslashreplace")
        async with self._lock:
            for day in dict.fromkeys(days):
                name = daily_note_name(day)
                data = await self._documents.read_bytes(name)
                lines = data.split(b"\n")
                for index in range(len(lines) - 1, -1, -1):
                    line = lines[index].rstrip(b"\r")
                    if (time := _NOTE_TIME.match(line)) is not None and line[time.end() :] == body:
                        del lines[index]
                        await self._documents.write(name, b"\n".join(lines))
                        return True
        return False

    async def read_days(self, days: list[date]) -> list[str | OSError]:
        """Each day's notes, stripped (empty when there are none; an unreadable file's error in its place),
        with one look at the folder's events for all of them."""
        texts = await self._documents.read_many([daily_note_name(day) for day in days])
        return [text if isinstance(text, OSError) else (text or "").strip() for text in texts]

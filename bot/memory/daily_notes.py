"""Daily notes: one line per finished exchange in `memory/YYYY-MM-DD.md` (CONTRACT's format).

`[HH:mm] User: {text} | Assistant: {text}`, the user's text cut to 200 characters, the assistant's to
300, newlines replaced by spaces; the time and the day are the bot's time zone's (`Clock`).
"""

from __future__ import annotations

import re
from datetime import date, datetime

from bot.memory.file_cache import TextFileCache
from bot.storage.files import append_lines, file_signature, line_bytes
from bot.workspace import MemoryPaths

USER_TEXT_LIMIT = 200
ASSISTANT_TEXT_LIMIT = 300
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def one_line(text: str, limit: int) -> str:
    """`text` on one line (every line break a space), cut to `limit` characters."""
    return _LINE_BREAKS.sub(" ", text)[:limit]


def format_note_line(at: datetime, user_text: str, assistant_text: str) -> str:
    return (
        f"[{at:%H:%M}] User: {one_line(user_text, USER_TEXT_LIMIT)} "
        f"| Assistant: {one_line(assistant_text, ASSISTANT_TEXT_LIMIT)}"
    )


class DailyNotes:
    """The daily note files of one memory scope."""

    def __init__(self, paths: MemoryPaths, cache: TextFileCache | None = None) -> None:
        self._paths = paths
        self._cache = cache or TextFileCache()

    async def append(self, at: datetime, user_text: str, assistant_text: str) -> str:
        """Append the exchange to `at`'s day; returns the line written."""
        line = format_note_line(at, user_text, assistant_text)
        path = self._paths.daily_note_file(at.date())
        before = file_signature(path)
        await append_lines(path, [line])
        self._cache.appended(path, before, line_bytes(line))
        return line

    async def read(self, day: date) -> str:
        """The day's notes, stripped; empty when there are none."""
        return (await self._cache.read(self._paths.daily_note_file(day)) or "").strip()

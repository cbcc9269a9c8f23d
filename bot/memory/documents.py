"""Where a memory scope's MEMORY.md and daily notes are kept: the `MemoryDocuments` interface and its files.

`LongTermMemory` and `DailyNotes` decide what is written (the note line's format, what the model is
shown); a documents store only keeps the texts by name (`MEMORY.md`, `YYYY-MM-DD.md`): as the scope's
files (`MemoryFiles`), or as rows of PostgreSQL (`postgres_documents.MemoryDocumentRows`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Protocol

from bot.memory.file_cache import TextFileCache
from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, file_signature, line_bytes, write_atomic
from bot.workspace import MemoryPaths

LONG_TERM_NAME = "MEMORY.md"
# The owner's memory: the folder memory/ itself, the scope of every chat with `memory.scope: global`.
OWNER_SCOPE = "."


def daily_note_name(day: date) -> str:
    return f"{day.isoformat()}.md"


class MemoryDocuments(Protocol):
    """One scope's texts by name. A failed read or write raises `OSError` (a database's failure is one)."""

    async def read(self, name: str) -> str | None:
        """The text, or None when there is none."""
        ...

    async def read_many(self, names: list[str]) -> list[str | OSError | None]:
        """`read` of each name (an unreadable one's error in its place)."""
        ...

    async def write(self, name: str, text: bytes) -> None:
        """Replace the text whole (a crash leaves the old or the new one)."""
        ...

    async def append_line(self, name: str, line: str) -> None:
        """Add one line at the end (durable, or by the deferred fsyncs' next round)."""
        ...

    async def read_bytes(self, name: str) -> bytes:
        """The text as stored, every byte (empty when there is none): what a rewrite starts from."""
        ...


# The documents of a scope kept in the database, by the scope's folder under memory/ ("." for the owner's).
DocumentsInDatabase = Callable[[str], MemoryDocuments]


class MemoryFiles:
    """The scope's files: MEMORY.md and `YYYY-MM-DD.md` in its folder, read through a `TextFileCache`."""

    def __init__(
        self, paths: MemoryPaths, cache: TextFileCache | None = None, deferred: DeferredSync | None = None
    ) -> None:
        self._paths = paths
        self._cache = cache or TextFileCache()
        self._deferred = deferred

    def _path(self, name: str) -> Path:
        if name == LONG_TERM_NAME:
            return self._paths.long_term_file
        return self._paths.daily_note_file(date.fromisoformat(name.removesuffix(".md")))

    async def read(self, name: str) -> str | None:
        return await self._cache.read(self._path(name))

    async def read_many(self, names: list[str]) -> list[str | OSError | None]:
        return await self._cache.read_all([self._path(name) for name in names])

    async def write(self, name: str, text: bytes) -> None:
        await write_atomic(self._path(name), text)

    async def append_line(self, name: str, line: str) -> None:
        path = self._path(name)
        before = file_signature(path)
        await append_lines(path, [line], self._deferred)
        self._cache.appended(path, before, line_bytes(line))

    async def read_bytes(self, name: str) -> bytes:
        return await asyncio.to_thread(_read_bytes, self._path(name))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""

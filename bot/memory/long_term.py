"""`LongTermMemory`: `MEMORY.md`, free Markdown the owner and the model curate.

Checked on every message (cached only while the file is unchanged), so a hand edit takes effect on
the next message. Writes are atomic rewrites.
"""

from __future__ import annotations

from bot.memory.file_cache import TextFileCache
from bot.storage.files import write_atomic
from bot.workspace import MemoryPaths


class LongTermMemory:
    """MEMORY.md of one memory scope."""

    def __init__(self, paths: MemoryPaths, cache: TextFileCache | None = None) -> None:
        self._path = paths.long_term_file
        self._cache = cache or TextFileCache()

    async def read(self) -> str:
        return (await self._cache.read(self._path) or "").strip()

    async def write(self, content: str) -> None:
        text = content.strip()
        await write_atomic(self._path, (text + "\n" if text else "").encode("utf-8"))

    async def append(self, content: str) -> None:
        current = await self.read()
        await self.write(f"{current}\n{content.strip()}" if current else content)

    async def replace(self, old: str, new: str) -> bool:
        """Replace the first occurrence of `old`; False (nothing written) when it is not there."""
        current = await self.read()
        if not old or old not in current:
            return False
        await self.write(current.replace(old, new, 1))
        return True

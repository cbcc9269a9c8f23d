"""`LongTermMemory`: `MEMORY.md`, free Markdown the owner and the model curate.

Checked on every message (a file is cached only while it is unchanged), so a hand edit takes effect on
the next message. Writes replace it whole (`MemoryDocuments.write`: an atomic rewrite of the file).
Markdown comments (`<!-- ... -->`) are the owner's notes to themselves (a new MEMORY.md starts with a
guide in one): the model is never shown them.
"""

from __future__ import annotations

import re

from bot.memory.documents import LONG_TERM_NAME, MemoryDocuments

COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


class LongTermMemory:
    """MEMORY.md of one memory scope."""

    def __init__(self, documents: MemoryDocuments) -> None:
        self._documents = documents
        # The last text read and what the model is shown of it: asked on every message, changed rarely.
        self._shown: tuple[str, str] = ("", "")

    async def read(self) -> str:
        """The whole file, comments included: what an edit starts from."""
        return (await self._documents.read(LONG_TERM_NAME) or "").strip()

    async def for_model(self) -> str:
        """The file without its Markdown comments: what the model is shown."""
        text = await self.read()
        if text != self._shown[0]:
            # Where a comment was, at most one blank line stays.
            shown = re.sub(r"\n{3,}", "\n\n", COMMENT.sub("", text)).strip() if "<!--" in text else text
            self._shown = (text, shown)
        return self._shown[1]

    async def write(self, content: str) -> None:
        text = content.strip()
        await self._documents.write(LONG_TERM_NAME, (text + "\n" if text else "").encode("utf-8"))

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

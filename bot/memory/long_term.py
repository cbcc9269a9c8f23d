"""`LongTermMemory`: `MEMORY.md`, free Markdown the owner and the model curate.

Checked on every message (a file is cached only while it is unchanged), so a hand edit takes effect on
the next message. Writes replace it whole (`MemoryDocuments.write`: an atomic rewrite of the file).
Markdown comments (`<!-- ... -->`) are the owner's notes to themselves (a new MEMORY.md starts with a
guide in one): the model is never shown them.

A hand-edited file is the person's text, whatever it holds: a byte order mark is read past; a byte that is
not UTF-8 is shown as `�` and kept as it is by every rewrite the bot makes (an append, a replace); a file
that is not text at all (NUL bytes: a binary saved under the name) is left out of the prompt and kept as
it is. Either is logged once per change of the file, with what to do about it.
"""

from __future__ import annotations

import logging
import re

from bot.memory.documents import LONG_TERM_NAME, MemoryDocuments
from bot.storage.files import BYTE_ORDER_MARK

log = logging.getLogger(__name__)

COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def not_text(data: bytes) -> str | None:
    """What keeps `data` from being plain UTF-8 text, said so that a person can fix it; None when it is text."""
    if b"\x00" in data:
        return "it is not text (it holds NUL bytes: a binary file saved under this name?); the bot leaves it out"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return (
            f"line {line} holds bytes that are not UTF-8 (shown to the model as \N{REPLACEMENT CHARACTER}); "
            "save the file as UTF-8"
        )
    return None


class LongTermMemory:
    """MEMORY.md of one memory scope."""

    def __init__(self, documents: MemoryDocuments) -> None:
        self._documents = documents
        # The last text read and what the model is shown of it: asked on every message, changed rarely.
        self._shown: tuple[str, str] = ("", "")

    async def read(self) -> str:
        """The whole file, comments included (a byte that is not UTF-8 as `�`): what the editor shows."""
        return (await self._documents.read(LONG_TERM_NAME) or "").removeprefix(BYTE_ORDER_MARK).strip()

    async def for_model(self) -> str:
        """The file without its Markdown comments: what the model is shown."""
        text = await self.read()
        if text != self._shown[0]:
            # Where a comment was, at most one blank line stays.
            shown = re.sub(r"\n{3,}", "\n\n", COMMENT.sub("", text)).strip() if "<!--" in text else text
            if "\N{REPLACEMENT CHARACTER}" in text or "\x00" in text:
                problem = not_text(await self._documents.read_bytes(LONG_TERM_NAME))
                if problem is not None:
                    log.warning("[Memory] %s: %s", LONG_TERM_NAME, problem)
                    if "\x00" in text:
                        shown = ""
            self._shown = (text, shown)
        return self._shown[1]

    async def write(self, content: str) -> None:
        text = content.strip()
        # `surrogateescape`: the bytes a person wrote that are not UTF-8, read back by `_stored`, go out unchanged.
        await self._documents.write(LONG_TERM_NAME, (text + "\n" if text else "").encode("utf-8", "surrogateescape"))

    async def append(self, content: str) -> None:
        current = await self._stored()
        await self.write(f"{current}\n{content.strip()}" if current else content)

    async def replace(self, old: str, new: str) -> bool:
        """Replace the first occurrence of `old`; False (nothing written) when it is not there."""
        current = await self._stored()
        if not old or old not in current:
            return False
        await self.write(current.replace(old, new, 1))
        return True

    async def _stored(self) -> str:
        """The file as stored, every byte that is not UTF-8 kept as it is: what a rewrite of the bot's starts from."""
        data = await self._documents.read_bytes(LONG_TERM_NAME)
        text = data.decode("utf-8", "surrogateescape").removeprefix(BYTE_ORDER_MARK)
        # Line ends as the model reads them (`\n`), so that what it asks to replace is found in a CRLF file too.
        return text.replace("\r\n", "\n").replace("\r", "\n").strip()

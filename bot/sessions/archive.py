"""`MessageArchive`: every message a chat ever had, uncompacted, in `sessions/archive/{id}.jsonl`.

Append-only and never rewritten, so saving a message costs one append however long the history.
A torn last line (a crash mid-append) is skipped on read and cut off before the next append. A message
can be appended twice: a crash after its archive append and before the session was saved leaves it
out of the session, and the restart stores it again under the same id. Reading keeps the first copy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.domain.message import Message
from bot.domain.session import checked_session_id
from bot.storage.files import append_lines, read_lines_from_sync, whole_lines_size_sync
from bot.storage.jsonl import dumps_line, parse_jsonl, read_jsonl

log = logging.getLogger(__name__)


class MessageArchive:
    """The full history of every chat, one JSONL file per session."""

    def __init__(self, archive_dir: Path) -> None:
        self._dir = archive_dir

    def path_for(self, session_id: str) -> Path:
        return self._dir / f"{checked_session_id(session_id)}.jsonl"

    async def append(self, session_id: str, messages: list[Message]) -> int:
        """Append `messages` durably; returns the archive's size after them."""
        return await self.append_lines(session_id, lines_of(messages))

    async def append_lines(self, session_id: str, lines: list[str]) -> int:
        """Append `lines` (`lines_of` the messages, made while the session's save had them at hand)
        durably; returns the archive's size after them (0 when there was nothing to append)."""
        return await append_lines(self.path_for(session_id), lines)

    def size_sync(self, session_id: str) -> int:
        """The archive's size in whole lines: where the next append will start."""
        return whole_lines_size_sync(self.path_for(session_id))

    async def read(self, session_id: str) -> list[Message]:
        """Every message of the chat, oldest first, each once (by id)."""
        return messages_of(session_id, await read_jsonl(self.path_for(session_id)))

    def read_from_sync(self, session_id: str, offset: int) -> list[Message]:
        """The messages appended from byte `offset` on (from the start of the line that holds it), oldest
        first, each once: what the session file, written when the archive was that long, may not hold."""
        path = self.path_for(session_id)
        return messages_of(session_id, parse_jsonl(read_lines_from_sync(path, offset), path))


def messages_of(session_id: str, records: list[dict[str, Any]]) -> list[Message]:
    """The messages of archive records, oldest first, each once (the first copy of an id is kept)."""
    messages: dict[str, Message] = {}
    for record in records:
        try:
            message = Message.model_validate(record)
        except ValidationError:
            log.warning("[Session] Skipped an archive record of %s that is not a message", session_id)
            continue
        messages.setdefault(message.id, message)
    return list(messages.values())


def lines_of(messages: list[Message]) -> list[str]:
    """The archive lines of `messages`, one JSON object each."""
    return [dumps_line(message.to_json_dict()) for message in messages]

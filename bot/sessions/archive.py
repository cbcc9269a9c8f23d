"""`MessageArchive`: every message a chat ever had, uncompacted, in `sessions/archive/{id}.jsonl`.

Append-only and never rewritten, so saving a message costs one append however long the history.
A torn last line (a crash mid-append) is skipped on read and cut off before the next append.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from bot.domain.message import Message
from bot.domain.session import checked_session_id
from bot.storage.files import append_lines
from bot.storage.jsonl import dumps_line, read_jsonl

log = logging.getLogger(__name__)


class MessageArchive:
    """The full history of every chat, one JSONL file per session."""

    def __init__(self, archive_dir: Path) -> None:
        self._dir = archive_dir

    def path_for(self, session_id: str) -> Path:
        return self._dir / f"{checked_session_id(session_id)}.jsonl"

    async def append(self, session_id: str, messages: list[Message]) -> None:
        await append_lines(self.path_for(session_id), [dumps_line(m.to_json_dict()) for m in messages])

    async def read(self, session_id: str) -> list[Message]:
        messages = []
        for record in await read_jsonl(self.path_for(session_id)):
            try:
                messages.append(Message.model_validate(record))
            except ValidationError:
                log.warning("[Session] Skipped an archive record of %s that is not a message", session_id)
        return messages

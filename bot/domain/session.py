"""`AgentSession`: one chat's live conversation, as stored in `sessions/{channelType}:{chatId}.json`."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from bot.domain.message import Message
from bot.domain.model import CamelModel, utc_now
from bot.domain.session_metadata import SessionMetadata


class SessionState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"


_SAFE_SESSION_ID = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*:[A-Za-z0-9_.@+-]+$")


class InvalidSessionId(ValueError):
    """A session id that could name a path outside `sessions/` (ids become file names)."""


def checked_session_id(session_id: str) -> str:
    """`session_id` if it is safe as a file name, else `InvalidSessionId`."""
    if not _SAFE_SESSION_ID.match(session_id) or ".." in session_id:
        raise InvalidSessionId(f"unsafe session id {session_id!r}")
    return session_id


def session_id_for(channel_type: str, chat_id: str) -> str:
    return checked_session_id(f"{channel_type}:{chat_id}")


class AgentSession(CamelModel):
    """The messages the model sees for one chat (compaction-bounded), plus its metadata.

    `metadata` holds what the bot keeps per chat besides the messages (`SessionMetadata`: usage,
    compactions, the active skill, ...); the full uncompacted history lives in the archive, not here.
    """

    id: str
    channel_type: str
    chat_id: str
    state: SessionState = SessionState.ACTIVE
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    metadata: SessionMetadata = Field(default_factory=SessionMetadata)
    messages: list[Message] = Field(default_factory=list)

    @classmethod
    def new(cls, channel_type: str, chat_id: str) -> AgentSession:
        return cls(id=session_id_for(channel_type, chat_id), channel_type=channel_type, chat_id=chat_id)

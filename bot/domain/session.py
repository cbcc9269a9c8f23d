"""`AgentSession`: one chat's live conversation, as stored in `sessions/{channelType}:{chatId}.json`."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from bot.domain.message import Message
from bot.domain.model import CamelModel, utc_now


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

    `metadata` holds counters the bot keeps per chat (`compactions`, `lastUsage`, ...); the full
    uncompacted history lives in the archive, not here.
    """

    id: str
    channel_type: str
    chat_id: str
    state: SessionState = SessionState.ACTIVE
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    metadata: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)

    @classmethod
    def new(cls, channel_type: str, chat_id: str) -> AgentSession:
        return cls(id=session_id_for(channel_type, chat_id), channel_type=channel_type, chat_id=chat_id)

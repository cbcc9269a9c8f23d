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


_SAFE_SESSION_ID = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*:[A-Za-z0-9_.@+-]+(?::topic:[0-9]+)?$")
# A topic of a forum chat is a conversation of its own: its chat id is the chat's, this, and the topic's id
# (`telegram:-1001234567890:topic:42`); a chat without topics, and a forum's General topic, keep the chat's.
TOPIC_MARK = ":topic:"


class InvalidSessionId(ValueError):
    """A session id that could name a path outside `sessions/` (ids become file names)."""


def checked_session_id(session_id: str) -> str:
    """`session_id` if it is safe as a file name, else `InvalidSessionId`."""
    if not _SAFE_SESSION_ID.match(session_id) or ".." in session_id:
        raise InvalidSessionId(f"unsafe session id {session_id!r}")
    return session_id


def session_id_for(channel_type: str, chat_id: str) -> str:
    return checked_session_id(f"{channel_type}:{chat_id}")


def topic_chat_id(chat_id: str, topic_id: str | None) -> str:
    """The chat id of one topic of a forum chat (`chat_id` itself for None: no topic, or the General one)."""
    return chat_id if topic_id is None else f"{chat_id}{TOPIC_MARK}{topic_id}"


def chat_and_topic(chat_id: str) -> tuple[str, str | None]:
    """A chat id split into the chat's own id and its topic's (None when it names no topic)."""
    chat, mark, topic = chat_id.partition(TOPIC_MARK)
    return (chat, topic) if mark else (chat_id, None)


def whole_chat_session_id(session_id: str) -> str:
    """The session id of the chat a topic's session belongs to (the id itself for a chat without topics):
    what the chat keeps for all its topics, its memory, is keyed by it."""
    return session_id.partition(TOPIC_MARK)[0]


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

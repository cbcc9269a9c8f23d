"""`Message`: one entry of a conversation, including structured tool calls and tool results."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from pydantic import ConfigDict, Field, field_validator

from bot.domain.model import CamelModel, utc_now
from bot.domain.text import scrub_surrogates


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(CamelModel):
    """A function call the model asked for; `arguments` is the model's raw JSON text, as sent."""

    id: str
    name: str
    arguments: str = "{}"


class Sender(CamelModel):
    """Who wrote a user message: a stable id (the channel's user id) and the display name to show."""

    id: str
    name: str


class Quote(CamelModel):
    """The message a user message replies to: who wrote it and its text (cut), as the model is shown it."""

    author: str
    text: str


class MediaRef(CamelModel):
    """A file that came with a user message, kept under the workspace (`path` is relative to it).

    Only the reference is stored in the session: the bytes stay in the file, and the prompt builder
    turns an image into a data URL each time it is sent.
    """

    kind: str = "image"
    path: str
    mime: str = "image/jpeg"
    caption: str | None = None
    # The image's pixel size where the channel gave it (a Telegram photo size), for its token count.
    width: int | None = None
    height: int | None = None


def forwarded_note(author: str) -> str:
    """What introduces a forwarded message, for the model and in memory: its words are `author`'s, not its
    sender's."""
    return f"[Forwarded from {author}]"


def new_message_id() -> str:
    return uuid.uuid4().hex


class Message(CamelModel):
    """A conversation message as stored in the session and the archive (the format of docs/memory.md).

    Frozen: a message is made whole and never edited in place (a change to a conversation appends a
    message or puts a new list in place), so what was derived from it once (its JSON in the session
    file, its cost in tokens) stays true for as long as it exists.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_message_id)
    role: Role
    content: str = ""
    timestamp: datetime = Field(default_factory=utc_now)
    # Set on an assistant message that requests tools.
    tool_calls: list[ToolCall] | None = None
    # Set on a tool result: which call it answers, and the tool's name.
    tool_call_id: str | None = None
    name: str | None = None
    # Optional additions on user messages (older session files have none of them):
    # who sent it, the message it replies to, who wrote it when it is forwarded, the images that came
    # with it, the id of the stored user message it corrects (an edit after the answer), and the
    # channel's own id of the message.
    sender: Sender | None = None
    quote: Quote | None = None
    forwarded_from: str | None = None
    media: list[MediaRef] | None = None
    correction_of: str | None = None
    channel_message_id: str | None = None

    @field_validator("content")
    @classmethod
    def _storable_text(cls, value: str) -> str:
        return scrub_surrogates(value)

    @classmethod
    def user(cls, text: str, message_id: str | None = None) -> Message:
        return cls(role=Role.USER, content=text, id=message_id or new_message_id())

    @classmethod
    def assistant(cls, text: str, tool_calls: list[ToolCall] | None = None) -> Message:
        return cls(role=Role.ASSISTANT, content=text, tool_calls=tool_calls or None)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role=Role.SYSTEM, content=text)

    @classmethod
    def tool_result(cls, call: ToolCall, output: str) -> Message:
        return cls(role=Role.TOOL, content=output, tool_call_id=call.id, name=call.name)

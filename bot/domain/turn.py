"""`TurnContext`: what one inbound message carries through the pipeline, system to system."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bot.domain.inbound import InboundMessage
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.settings import RuntimeConfig


@dataclass
class Usage:
    """Token counts the provider reported for one model call."""

    prompt_tokens: int
    completion_tokens: int
    model: str

    def to_json_dict(self) -> dict[str, object]:
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "model": self.model,
        }


class ReplyStream(Protocol):
    """A reply shown while the model writes it. The channel decides how often the user sees updates."""

    async def update(self, text: str) -> None:
        """The whole text so far (not a delta)."""

    async def finish(self, text: str) -> None:
        """The final text; delivered exactly once, however many updates came before."""


@dataclass
class TurnContext:
    """State of one run: the inbound message, the session, the prompt parts built, the reply.

    Systems read what earlier systems left here and add their own part; nothing else is shared.
    """

    inbound: InboundMessage
    session: AgentSession
    config: RuntimeConfig
    user_message: Message
    model: str
    # Sections of the system prompt in order, by name ("base", "memory", "rag", ...), built at 20.
    system_prompt_parts: dict[str, str] = field(default_factory=dict)
    # The final answer text for the user, set by the tool loop (30).
    reply_text: str | None = None
    # A note shown before the reply (not stored with it), e.g. that the model could not see an image.
    reply_note: str | None = None
    # Set once the reply reached the channel (a streaming system may deliver it itself).
    reply_delivered: bool = False
    # Why this turn could not be written to disk, if it could not (the reply says so).
    storage_problem: str | None = None
    # Where to stream the reply as it is written, when the channel can show that.
    reply_stream: ReplyStream | None = None
    usages: list[Usage] = field(default_factory=list)
    # Messages this turn added after the user's (assistant text, tool calls and results).
    new_messages: list[Message] = field(default_factory=list)

    @property
    def system_prompt(self) -> str:
        return "\n\n".join(part for part in self.system_prompt_parts.values() if part.strip())

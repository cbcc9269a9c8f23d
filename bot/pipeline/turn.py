"""`TurnContext`: what one inbound message carries through the pipeline, system to system."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bot.context.plan import ContextPlan
from bot.domain.inbound import InboundMessage
from bot.domain.memory import MemoryPack
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.domain.turn import PromptSection, ReplyStream, Usage
from bot.settings import RuntimeConfig


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
    # Sections of the system prompt in the order they are sent, built at 20.
    system_prompt_parts: dict[PromptSection, str] = field(default_factory=dict)
    # The final answer text for the user, set by the tool loop (30).
    reply_text: str | None = None
    # A note shown before the reply (not stored with it), e.g. that the model could not see an image.
    reply_note: str | None = None
    # Why this turn could not be written to disk, if it could not (the reply says so).
    storage_problem: str | None = None
    # Where to show the reply as it is written, when the channel can (the outbound step finishes it).
    reply_stream: ReplyStream | None = None
    usages: list[Usage] = field(default_factory=list)
    # The turn's `ContextPlan`: the one AutoCompaction (18) checked, when it compacted nothing; ContextBuilding
    # (20) starts from it instead of planning again, and leaves it completed with what each part took.
    plan: ContextPlan | None = None
    # The structured memory chosen for the prompt at 20 (None when memory was off or unread).
    memory_pack: MemoryPack | None = None
    # Messages this turn added after the user's (assistant text, tool calls and results).
    new_messages: list[Message] = field(default_factory=list)

    @property
    def turn_id(self) -> str:
        """The turn's id in log lines: the id of the user message it answers."""
        return self.user_message.id

    @property
    def system_prompt(self) -> str:
        """The parts that stay the same from message to message: the first system message."""
        return self._joined(not section.made_each_turn for section in self.system_prompt_parts)

    @property
    def turn_prompt(self) -> str:
        """The parts made for this message (time, retrieved memory, Relevant Memory): the system
        message placed just before the newest user message, after the history."""
        return self._joined(section.made_each_turn for section in self.system_prompt_parts)

    def _joined(self, chosen: Iterable[bool]) -> str:
        parts = zip(chosen, self.system_prompt_parts.values(), strict=True)
        return "\n\n".join(part for keep, part in parts if keep and part.strip())

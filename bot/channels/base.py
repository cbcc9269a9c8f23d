"""The channel interface: how a messaging backend hands messages in and gets replies out.

A channel knows its transport (Telegram, the terminal) and nothing of memory, sessions or the model:
it turns what arrives into `InboundMessage`s for the handler it was started with, and it delivers
text back to a chat. Everything between is the pipeline's business.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from bot.domain.inbound import InboundMessage

InboundHandler = Callable[[InboundMessage], Awaitable[None]]


class Channel(ABC):
    """A transport the bot talks through: started with a handler, asked to deliver replies."""

    channel_type: str

    @abstractmethod
    async def start(self, handler: InboundHandler) -> None:
        """Begin receiving; each inbound message is awaited through `handler`. Returns once running."""

    async def stop_receiving(self) -> None:
        """Take no more messages, but keep delivering replies (shutdown lets runs in progress finish)."""
        return None

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and release the transport; replies already handed over are delivered first."""

    @abstractmethod
    async def send_text(self, chat_id: str, text: str) -> str | None:
        """Deliver a reply (Markdown from the model); returns the id of the last message sent, if any."""

    @abstractmethod
    async def edit_text(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the text of a message this channel sent (used for streamed replies)."""

    @abstractmethod
    async def send_typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; a transport without the notion does nothing."""

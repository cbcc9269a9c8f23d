"""The channel interface: how a messaging backend hands messages in and gets replies out.

A channel knows its transport (Telegram, the terminal) and nothing of memory, sessions or the model:
it turns what arrives into `InboundMessage`s for the handler it was started with, and it delivers
text back to a chat. Everything between is the pipeline's business.

A chat id names one conversation: a chat, or one topic of a forum chat (`topic_chat_id`), so that whatever
is sent to the chat id of a message that came from a topic (the reply, the typing action, a file, a
notice, a reminder set there) goes to that topic, and each topic has a session of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from bot.domain.chat_move import ChatMove
from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream

InboundHandler = Callable[[InboundMessage], Awaitable[None]]
# Told when a chat's id changes (`ChatMove`), and returns once what the bot keeps of it is under the new id.
ChatMoveHandler = Callable[[ChatMove], Awaitable[None]]


class FileUnavailable(Exception):
    """A file sent in the chat could not be fetched; the message says why, for the user."""


class ChatUnreachable(Exception):
    """The chat takes no message from the bot until a person there acts: the bot was blocked or removed, the
    account deleted, the chat is gone. Sending again will not help; a message from the chat shows it is open
    again. The message is the transport's reason."""


class Channel(ABC):
    """A transport the bot talks through: started with a handler, asked to deliver replies."""

    channel_type: str
    # What the wiring does when a chat of this channel gets a new id (set before `start`; None: nothing).
    chat_moved: ChatMoveHandler | None = None

    @abstractmethod
    async def start(self, handler: InboundHandler) -> None:
        """Begin receiving; each inbound message is awaited through `handler`. Returns once running."""

    @property
    def receiving(self) -> bool:
        """Whether messages can arrive now (for `/healthz`)."""
        return True

    async def stop_receiving(self) -> None:
        """Take no more messages, but keep delivering replies (shutdown lets runs in progress finish)."""
        return None

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and release the transport; replies already handed over are delivered first."""

    @abstractmethod
    async def send_text(self, chat_id: str, text: str) -> str | None:
        """Deliver a reply (Markdown from the model); returns the id of the last message sent, if any.
        Raises `ChatUnreachable` when the chat refuses the bot's messages for good."""

    @abstractmethod
    async def edit_text(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the text of a message this channel sent (used for streamed replies)."""

    def open_stream(self, chat_id: str) -> ReplyStream | None:
        """A stream to show a reply as it is written, or None when the channel cannot (the default)."""
        return None

    async def send_file(self, chat_id: str, file_name: str, data: bytes, caption: str | None = None) -> bool:
        """Deliver a file to the chat; False when this channel cannot send files (the default)."""
        return False

    async def download(self, file_id: str) -> bytes:
        """The bytes of a file sent in a chat (`Attachment.file_id`); raises `FileUnavailable` with the reason."""
        raise FileUnavailable("this channel cannot receive files")

    @abstractmethod
    async def send_typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; a transport without the notion does nothing."""

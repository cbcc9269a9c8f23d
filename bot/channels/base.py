"""The channel interface: how a messaging backend hands messages in and gets replies out.

A channel knows its transport (Telegram, the terminal) and nothing of memory, sessions or the model:
it turns what arrives into `InboundMessage`s for the handler it was started with, and it delivers
text back to a chat. Everything between is the pipeline's business.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream

InboundHandler = Callable[[InboundMessage], Awaitable[None]]

# `InboundMessage.extra` key: a reply the channel already decided on (e.g. "I can't see images yet" for
# a photo without a caption). The message then runs no pipeline: once the sender passed the access
# check, this text is sent in the chat's order, and nothing is stored.
CHANNEL_NOTICE = "channelNotice"
# `InboundMessage.extra` keys of a file sent in the chat (a document): the channel's reference to fetch
# it with `Channel.download`, its name, size in bytes and MIME type as the sender's app gave them.
FILE_ID, FILE_NAME, FILE_SIZE, FILE_MIME = "fileId", "fileName", "fileSize", "fileMime"
# `InboundMessage.extra` keys of an image for the model (a photo, or an image sent as a file): the
# reference to fetch it with `Channel.download`, its size in bytes and MIME type, and its pixel size
# ("WIDTHxHEIGHT") when the channel knows it.
IMAGE_ID, IMAGE_SIZE, IMAGE_MIME, IMAGE_PIXELS = "imageId", "imageSize", "imageMime", "imagePixels"
# ... of a voice note or audio file to transcribe: reference, size in bytes, MIME type, file name, and
# its length in seconds as the sender's app gave it (to judge whether the transcript is unclear).
AUDIO_ID, AUDIO_SIZE, AUDIO_MIME, AUDIO_NAME = "audioId", "audioSize", "audioMime", "audioName"
AUDIO_SECONDS = "audioSeconds"
# ... of the message this one replies to: its author's display name and its text (or caption).
QUOTE_AUTHOR, QUOTE_TEXT = "quoteAuthor", "quoteText"
# ... set ("1") on a new version of a message the person edited; `message_id` is the edited message's.
EDITED = "edited"


class FileUnavailable(Exception):
    """A file sent in the chat could not be fetched; the message says why, for the user."""


class Channel(ABC):
    """A transport the bot talks through: started with a handler, asked to deliver replies."""

    channel_type: str

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
        """Deliver a reply (Markdown from the model); returns the id of the last message sent, if any."""

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
        """The bytes of a file sent in a chat (`FILE_ID`); raises `FileUnavailable` with the reason."""
        raise FileUnavailable("this channel cannot receive files")

    @abstractmethod
    async def send_typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; a transport without the notion does nothing."""

"""`InboundMessage`: what a person sent, as the pipeline sees it, whatever the channel.

Every part of it is a typed field, from the channel that made it to the user message the model reads:
the text, the sender, the message it replies to (`quote`), who wrote it when it is forwarded, whether
it is an edit, a file that came with it (`attachment`: an image, a recording or a document, with its
size and type; the album's other photos, `album`), a notice the channel decided on, and, once the media
intake has run, the stored images (`image`, `album_images`) or whether the text is a transcript
(`transcribed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.domain.message import MediaRef, Quote

AttachmentKind = Literal["image", "audio", "document"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file sent with a message, as the channel describes it, to fetch with `Channel.download(file_id)`.

    `image`: a photo, or an image sent as a file, shown to the model; `audio`: a voice note or audio file,
    transcribed; `document`: any other file, read into the knowledge graph. Sizes are as the sender's app
    declared them (0 when it did not say).
    """

    kind: AttachmentKind
    file_id: str
    mime: str = ""
    size_bytes: int = 0
    name: str | None = None
    # An image's pixel size, when the channel gave it (a Telegram photo size).
    width: int | None = None
    height: int | None = None
    # A recording's length as the sender's app gave it, to judge whether its transcript is unclear.
    seconds: int | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message a person sent, as the pipeline sees it, whatever the channel."""

    channel_type: str
    chat_id: str
    user_id: str
    text: str
    message_id: str | None = None
    username: str | None = None
    # The sender's display name (first and last name as the channel gives it), for the model and memory.
    sender_name: str | None = None
    is_group: bool = False
    # A key that is the same when the transport delivers the same message twice (Telegram's update_id).
    dedup_key: str | None = None
    # A new version of a message the person edited; `message_id` is the edited message's.
    edited: bool = False
    # The message this one replies to: its author and its text (or caption), cut; and its id at the channel.
    quote: Quote | None = None
    reply_to: str | None = None
    # Who wrote a forwarded message (a person, a group, a channel): its words are theirs, not the sender's.
    forwarded_from: str | None = None
    # The file that came with the message, still at the channel.
    attachment: Attachment | None = None
    # The album (Telegram's media group) the file belongs to: the album's other files join this message.
    media_group: str | None = None
    # The album's other files, joined while the message waited for its turn (`Turn.joined`), still at the channel.
    album: tuple[Attachment, ...] = ()
    # A reply the channel already decided on (e.g. "I can't watch videos yet"): once the sender passed
    # the access check, it is sent in the chat's order, and nothing runs or is stored.
    notice: str | None = None
    # Set by the media intake: the image kept under the workspace, for the model.
    image: MediaRef | None = None
    # Set by the media intake: the album's other images, kept the same way.
    album_images: tuple[MediaRef, ...] = ()
    # Set by the media intake: the text is (or ends with) the transcript of a recording.
    transcribed: bool = False

    @property
    def display_name(self) -> str:
        """The name to show the model for the sender: the display name, else @username, else the id."""
        return self.sender_name or (f"@{self.username}" if self.username else f"user {self.user_id}")

    @property
    def may_be_command(self) -> bool:
        """Whether the text is the sender's own, as typed: a forwarded message's (someone else's words) and a
        transcript are never run as a command."""
        return self.forwarded_from is None and not self.transcribed

    @property
    def session_id(self) -> str:
        return f"{self.channel_type}:{self.chat_id}"

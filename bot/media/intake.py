"""`MediaIntake`: before a message's turn runs, its image is fetched and kept, its audio transcribed.

Called in the chat's order after the access check. Each outcome is either the message to answer
(its text the caption or the transcript, the stored image in `image`, an album's other photos in
`album_images`) plus notes to send
first, or a clear reply and nothing else: an image or audio over its size limit, a file Telegram
would not give, an endpoint without transcription, audio it could not decode, a model without vision
and no caption to answer. The file URL (which holds the bot token) never leaves the channel.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field

from bot.channels.base import Channel, FileUnavailable
from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.message import MediaRef
from bot.llm.client import LlmClient
from bot.llm.errors import LlmError, LlmFailure
from bot.media.clarity import judge_clarity
from bot.media.pixels import pixel_size
from bot.media.store import MediaStore
from bot.settings import MediaConfig

log = logging.getLogger(__name__)

NO_VISION_REPLY = (
    "The model I use ({model}) can't see images, so I can't look at your photo. "
    "Add a caption or describe it in words, and I'll help."
)
NO_VISION_NOTE = "(The model I use ({model}) can't see images; I'm answering your caption alone.)"
NO_TRANSCRIPTION_REPLY = (
    "I can't listen to voice messages here: the model endpoint offers no speech-to-text "
    "(audio transcription). Please type your message."
)
UNDECODABLE_AUDIO_REPLY = "I couldn't decode that audio ({detail}). Please record it again or type your message."
NO_WORDS_REPLY = "I couldn't make out any words in that recording. Please try again or type your message."
TRANSCRIPT_ECHO = 'I heard: "{text}"'
# An unclear transcript is shown back up to this many characters even when `transcriptEchoChars` is smaller.
UNCLEAR_ECHO_MIN_CHARS = 200
UNCLEAR_TRANSCRIPT_ECHO = (
    'The recording was hard to make out; I heard: "{text}". If that is wrong, please say it again.'
)


def megabytes(size: int) -> str:
    """A size for people: "2.8 kB", "12.0 MB"."""
    return f"{size / 1_000_000:.1f} MB" if size >= 1_000_000 else f"{size / 1000:.1f} kB"


class VisionSupport:
    """The models the endpoint refused images for (found at run time), shared by intake and the tool loop."""

    def __init__(self) -> None:
        self._blind: set[str] = set()
        # Chats already told that the model cannot see images (told once per chat and model).
        self._told: set[tuple[str, str]] = set()

    def sees(self, model: str, config: MediaConfig) -> bool:
        return config.vision_enabled and model not in self._blind

    def mark_blind(self, model: str) -> None:
        if model not in self._blind:
            log.warning("[Media] %s refused an image; images go as text stand-ins from now on", model)
        self._blind.add(model)

    def first_telling(self, session_id: str, model: str) -> bool:
        """True the first time a chat is to be told that `model` cannot see images; False after."""
        if (session_id, model) in self._told:
            return False
        self._told.add((session_id, model))
        return True


@dataclass
class Prepared:
    """What to do with a message: answer `inbound` (None: nothing to answer) after sending `notes`."""

    inbound: InboundMessage | None
    notes: list[str] = field(default_factory=list)


class MediaIntake:
    """Turns a message's image or audio into what the turn needs; says clearly when it cannot."""

    def __init__(self, store: MediaStore, llm: LlmClient, vision: VisionSupport) -> None:
        self._store = store
        self._llm = llm
        self._vision = vision

    @staticmethod
    def has_media(inbound: InboundMessage) -> bool:
        return inbound.attachment is not None and inbound.attachment.kind in ("image", "audio")

    async def prepare(self, inbound: InboundMessage, channel: Channel, config: MediaConfig, model: str) -> Prepared:
        attachment = inbound.attachment
        if attachment is not None and attachment.kind == "image":
            return await self._image(inbound, attachment, channel, config, model)
        if attachment is not None and attachment.kind == "audio":
            return await self._audio(inbound, attachment, channel, config, model)
        return Prepared(inbound)

    async def _image(
        self, inbound: InboundMessage, image: Attachment, channel: Channel, config: MediaConfig, model: str
    ) -> Prepared:
        without_image = dataclasses.replace(inbound, attachment=None, album=())
        if not self._vision.sees(model, config):
            if not inbound.text.strip():
                return Prepared(None, [NO_VISION_REPLY.format(model=model)])
            first = self._vision.first_telling(inbound.session_id, model)
            return Prepared(without_image, [NO_VISION_NOTE.format(model=model)] if first else [])
        # With an album's other photos: one that cannot be had is said, and the rest answered.
        stored: list[MediaRef] = []
        notes: list[str] = []
        for each in (image, *inbound.album):
            kept = await self._kept(inbound, each, channel, config)
            if isinstance(kept, Prepared):
                notes += kept.notes
            else:
                stored.append(kept)
        if not stored:
            return Prepared(None, notes)
        answered = dataclasses.replace(without_image, image=stored[0], album_images=tuple(stored[1:]))
        return Prepared(answered, notes)

    async def _kept(
        self, inbound: InboundMessage, image: Attachment, channel: Channel, config: MediaConfig
    ) -> MediaRef | Prepared:
        """The image fetched and kept under the workspace, or the refusal the person gets."""
        mime = image.mime or "image/jpeg"
        too_big = f"That image is {{size}}; I take images up to {megabytes(config.max_image_bytes)}."
        data = await _download_within(channel, inbound, image, config.max_image_bytes, "image", too_big)
        if isinstance(data, Prepared):
            return data
        width, height = image.width, image.height
        if (width is None or height is None) and (size := pixel_size(data)) is not None:
            width, height = size  # an image sent as a file: Telegram gives no size for it
        path = await self._store.save(inbound.session_id, data, mime)
        log.info("[Media] Kept an image of %s (%d bytes) as %s", inbound.session_id, len(data), path)
        return MediaRef(kind="image", path=path, mime=mime, width=width, height=height)

    async def _audio(
        self, inbound: InboundMessage, audio: Attachment, channel: Channel, config: MediaConfig, model: str
    ) -> Prepared:
        too_big = f"That recording is {{size}}; I can transcribe up to {megabytes(config.max_audio_bytes)}."
        data = await _download_within(channel, inbound, audio, config.max_audio_bytes, "recording", too_big)
        if isinstance(data, Prepared):
            return data
        try:
            transcript = await self._llm.transcribe(
                data, audio.name or "voice.ogg", audio.mime, config.transcription_model,
                config.transcription_timeout_seconds,
            )  # fmt: skip
        except LlmError as error:
            if error.failure is LlmFailure.UNSUPPORTED:
                return Prepared(None, [NO_TRANSCRIPTION_REPLY])
            if error.failure is LlmFailure.BAD_REQUEST:
                return Prepared(None, [UNDECODABLE_AUDIO_REPLY.format(detail=_reason(error.detail))])
            return Prepared(None, [error.user_message])
        text_heard = transcript.text
        if not text_heard:
            return Prepared(None, [NO_WORDS_REPLY])
        clarity = judge_clarity(transcript, audio.seconds, config)
        log.info(
            "[Media] Transcribed %d bytes of %s: %d chars, %s (%s)",
            len(data),
            inbound.session_id,
            len(text_heard),
            "unclear" if clarity.unclear else "clear",
            clarity.reason,
        )
        caption = inbound.text.strip()
        text = f"{caption}\n\n{text_heard}" if caption else text_heard
        notes = []
        if clarity.unclear:
            # Shown whatever its length (cut only past the echo limit), so the person can tell what went wrong.
            limit = max(config.transcript_echo_chars, UNCLEAR_ECHO_MIN_CHARS)
            shown = text_heard if len(text_heard) <= limit else _cut_at_word(text_heard, limit)
            notes.append(UNCLEAR_TRANSCRIPT_ECHO.format(text=shown))
        elif config.transcript_echo_chars and len(text_heard) > config.transcript_echo_chars:
            notes.append(TRANSCRIPT_ECHO.format(text=_cut_at_word(text_heard, config.transcript_echo_chars)))
        return Prepared(dataclasses.replace(inbound, text=text, attachment=None, transcribed=True), notes)


async def _download_within(
    channel: Channel, inbound: InboundMessage, attachment: Attachment, limit: int, what: str, too_big: str
) -> bytes | Prepared:
    """The file's bytes, or the refusal the person gets: over `limit` as Telegram declared it (nothing is
    fetched) or as downloaded (`too_big`, with `{size}`), or not fetchable. `what` names it in the reply."""
    if attachment.size_bytes > limit:
        return Prepared(None, [too_big.format(size=megabytes(attachment.size_bytes))])
    try:
        data = await channel.download(attachment.file_id)
    except FileUnavailable as error:
        log.info("[Media] The %s sent in %s could not be fetched: %s", what, inbound.session_id, error)
        return Prepared(None, [f"I couldn't get your {what}: {error}."])
    if len(data) > limit:
        return Prepared(None, [too_big.format(size=megabytes(len(data)))])
    return data


def _cut_at_word(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a word boundary, with an ellipsis."""
    cut = text[:limit]
    if text[limit : limit + 1].strip() and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip() + "…"


def _reason(detail: str) -> str:
    """The endpoint's own words, short: "Error code: 400 - Invalid file format. ..." → "Invalid file format"."""
    words = re.sub(r"^Error code: \d+ - ", "", detail)
    if "'message': '" in words:
        words = words.split("'message': '", 1)[1].split("'", 1)[0]
    return words.split(". ", 1)[0].rstrip(".")[:160]

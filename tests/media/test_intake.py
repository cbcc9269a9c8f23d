"""`MediaIntake` on its own: what an image or a recording becomes before its turn runs, or the one clear
reply that ends the turn; the model client talks to the fake OpenAI-compatible server."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.channels.base import FileUnavailable
from bot.domain.inbound import Attachment, AttachmentKind, InboundMessage
from bot.llm.client import LlmClient
from bot.media.intake import (
    NO_TRANSCRIPTION_REPLY,
    NO_VISION_NOTE,
    NO_VISION_REPLY,
    NO_WORDS_REPLY,
    MediaIntake,
    VisionSupport,
)
from bot.media.pixels import PNG_SIGNATURE
from bot.media.store import MediaStore
from bot.settings import MediaConfig
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI, TranscriptSegment
from tests.fakes.recording_channel import RecordingChannel

PNG = PNG_SIGNATURE + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 640, 480, 8, 2, 0, 0, 0)
OGG = b"OggS" + b"\0" * 100
CONFIG = MediaConfig()


class FilesChannel(RecordingChannel):
    """A channel holding files by id; an unknown id is a file the transport would not give."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__()
        self.files = files
        self.downloads: list[str] = []

    async def download(self, file_id: str) -> bytes:
        self.downloads.append(file_id)
        if file_id not in self.files:
            raise FileUnavailable("the file is too old to fetch")
        return self.files[file_id]


@pytest.fixture
async def intake(tmp_path: Path, fake_openai: FakeOpenAI) -> AsyncIterator[MediaIntake]:
    llm = LlmClient(TEST_API_KEY, fake_openai.base_url)
    yield MediaIntake(MediaStore(tmp_path), llm, VisionSupport())
    await llm.close()


def with_file(
    kind: AttachmentKind, file_id: str, text: str = "", mime: str = "", size_bytes: int = 0
) -> InboundMessage:
    message = InboundMessage("test", "1", "1", text)
    return dataclasses.replace(message, attachment=Attachment(kind, file_id, mime, size_bytes))


async def test_an_image_is_kept_with_its_pixel_size_and_the_message_keeps_its_caption(
    intake: MediaIntake, tmp_path: Path
) -> None:
    channel = FilesChannel({"p": PNG})
    prepared = await intake.prepare(with_file("image", "p", "what is it?", mime="image/png"), channel, CONFIG, "m")
    assert prepared.notes == [] and prepared.inbound is not None
    image = prepared.inbound.image
    assert image is not None and (image.width, image.height, image.mime) == (640, 480, "image/png")
    assert (tmp_path / image.path).read_bytes() == PNG
    assert prepared.inbound.text == "what is it?" and prepared.inbound.attachment is None


async def test_an_image_over_the_limit_is_refused_before_anything_is_fetched(intake: MediaIntake) -> None:
    channel = FilesChannel({"p": PNG})
    declared = with_file("image", "p", size_bytes=CONFIG.max_image_bytes + 1)
    prepared = await intake.prepare(declared, channel, CONFIG, "m")
    assert prepared.inbound is None and prepared.notes[0].startswith("That image is 10.0 MB; I take images up to")
    assert channel.downloads == []
    small = CONFIG.model_copy(update={"max_image_bytes": 10})  # declared nothing: refused once downloaded
    prepared = await intake.prepare(with_file("image", "p"), channel, small, "m")
    assert prepared.inbound is None and prepared.notes[0].startswith(f"That image is {len(PNG) / 1000:.1f} kB")


async def test_a_file_the_channel_cannot_give_is_said(intake: MediaIntake) -> None:
    prepared = await intake.prepare(with_file("image", "gone"), FilesChannel({}), CONFIG, "m")
    assert (prepared.inbound, prepared.notes) == (None, ["I couldn't get your image: the file is too old to fetch."])


async def test_a_model_without_vision_answers_the_caption_and_says_so_once_per_chat(intake: MediaIntake) -> None:
    blind = CONFIG.model_copy(update={"vision_enabled": False})
    channel = FilesChannel({"p": PNG})
    alone = await intake.prepare(with_file("image", "p"), channel, blind, "m")
    assert (alone.inbound, alone.notes) == (None, [NO_VISION_REPLY.format(model="m")])
    first = await intake.prepare(with_file("image", "p", "a caption"), channel, blind, "m")
    assert first.inbound is not None and first.inbound.text == "a caption" and first.inbound.image is None
    assert first.notes == [NO_VISION_NOTE.format(model="m")]
    again = await intake.prepare(with_file("image", "p", "another"), channel, blind, "m")
    assert again.notes == [] and channel.downloads == []


async def test_a_recording_becomes_its_transcript_after_the_caption(
    intake: MediaIntake, fake_openai: FakeOpenAI
) -> None:
    fake_openai.transcript = "buy milk"
    prepared = await intake.prepare(
        with_file("audio", "v", "note:", mime="audio/ogg"), FilesChannel({"v": OGG}), CONFIG, "m"
    )
    assert prepared.notes == [] and prepared.inbound is not None
    assert (prepared.inbound.text, prepared.inbound.transcribed) == ("note:\n\nbuy milk", True)
    [request] = fake_openai.transcription_requests()
    assert request["file"] == OGG and request["fileName"] == "voice.ogg"


async def test_a_long_transcript_is_shown_back_cut_at_a_word_and_an_unclear_one_whole(
    intake: MediaIntake, fake_openai: FakeOpenAI
) -> None:
    channel = FilesChannel({"v": OGG})
    fake_openai.transcript = "word " * 100
    short_echo = CONFIG.model_copy(update={"transcript_echo_chars": 12})
    prepared = await intake.prepare(with_file("audio", "v"), channel, short_echo, "m")
    assert prepared.notes == ['I heard: "word word…"']
    fake_openai.transcript = "maybe milk"
    fake_openai.transcript_segments = [TranscriptSegment(0.0, 3.0, avg_logprob=-2.0, text="maybe milk")]
    prepared = await intake.prepare(with_file("audio", "v"), channel, CONFIG, "m")
    assert prepared.notes == [
        'The recording was hard to make out; I heard: "maybe milk". If that is wrong, please say it again.'
    ]


async def test_a_recording_the_endpoint_cannot_hear_gets_a_clear_reply(
    intake: MediaIntake, fake_openai: FakeOpenAI
) -> None:
    channel = FilesChannel({"v": OGG, "bad": b"not audio"})
    undecodable = await intake.prepare(with_file("audio", "bad"), channel, CONFIG, "m")
    assert undecodable.inbound is None
    assert undecodable.notes == [
        "I couldn't decode that audio (Invalid file format). Please record it again or type your message."
    ]
    fake_openai.transcript = ""
    assert (await intake.prepare(with_file("audio", "v"), channel, CONFIG, "m")).notes == [NO_WORDS_REPLY]
    fake_openai.transcriptions_supported = False
    assert (await intake.prepare(with_file("audio", "v"), channel, CONFIG, "m")).notes == [NO_TRANSCRIPTION_REPLY]


async def test_a_message_without_media_passes_as_it_is(intake: MediaIntake) -> None:
    plain = InboundMessage("test", "1", "1", "hello")
    assert not MediaIntake.has_media(plain) and not MediaIntake.has_media(with_file("document", "d"))
    assert (await intake.prepare(plain, FilesChannel({}), CONFIG, "m")).inbound is plain

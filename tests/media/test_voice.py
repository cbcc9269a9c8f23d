"""Voice notes and audio files: transcribed through the endpoint's `/audio/transcriptions` (the real
`openai` client against the fake model), the transcript answered as the user's message, and clear
answers when the endpoint has no transcription, the file is too big or the audio cannot be decoded."""

from __future__ import annotations

import json

from tests.channels.telegram_harness import OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

OGG = b"OggS\x00" + b"\x01voice frames" * 50


async def replies(fake_telegram: FakeTelegram, count: int) -> list[str]:
    return [m.text for m in await fake_telegram.await_messages(OWNER, count, timeout=15)]


async def test_a_voice_note_is_transcribed_and_answered(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start({"media": {"transcriptionModel": "whisper-large"}})
    fake_openai.transcript = "remind me to water the plants"
    fake_openai.script("I'll remind you.")
    fake_telegram.push_voice(OWNER, content=OGG)
    assert await replies(fake_telegram, 1) == ["I'll remind you."]
    [request] = fake_openai.transcription_requests()
    assert (request["model"], request["file"]) == ("whisper-large", OGG)
    assert request["fileName"].endswith(".ogg")
    assert fake_openai.user_texts() == ["remind me to water the plants"]
    stored = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == ["remind me to water the plants"]


async def test_a_long_transcript_is_shown_back_briefly(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"transcriptEchoChars": 40}})
    fake_openai.transcript = "so here is the long story of my day, which started early and went on " * 3
    fake_openai.script("What a day.")
    fake_telegram.push_voice(OWNER, content=OGG)
    echo, answer = await replies(fake_telegram, 2)
    assert echo == 'I heard: "so here is the long story of my day,…"'
    assert answer == "What a day."


async def test_an_endpoint_without_transcription_is_answered_clearly(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.transcriptions_supported = False
    fake_telegram.push_voice(OWNER, content=OGG)
    [reply] = await replies(fake_telegram, 1)
    assert "no speech-to-text" in reply and "type your message" in reply
    assert len([r for r in fake_openai.requests if r.path == "/v1/audio/transcriptions"]) == 1  # asked once
    assert fake_openai.chat_requests() == []
    assert not (bot.workspace / "sessions" / f"telegram:{OWNER}.json").exists()


async def test_audio_that_cannot_be_decoded_is_answered_clearly(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_telegram.push_voice(OWNER, content=b"definitely not audio")
    [reply] = await replies(fake_telegram, 1)
    assert reply == "I couldn't decode that audio (Invalid file format). Please record it again or type your message."
    assert fake_openai.chat_requests() == []


async def test_a_recording_over_the_limit_is_refused_before_download(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"maxAudioBytes": 1000}})
    fake_telegram.push_voice(OWNER, content=OGG * 3)
    [reply] = await replies(fake_telegram, 1)
    assert reply == "That recording is 2.0 kB; I can transcribe up to 1.0 kB."
    assert fake_telegram.calls_to("getFile") == [] and fake_openai.transcription_requests() == []


async def test_silence_is_said_to_be_unclear(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.transcript = "   "
    fake_telegram.push_voice(OWNER, content=OGG)
    [reply] = await replies(fake_telegram, 1)
    assert reply == "I couldn't make out any words in that recording. Please try again or type your message."
    assert fake_openai.chat_requests() == []

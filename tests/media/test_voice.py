"""Voice notes and audio files: transcribed through the endpoint's `/audio/transcriptions` (the real
`openai` client against the fake model), the transcript answered as the user's message, and clear
answers when the endpoint has no transcription, the file is too big or the audio cannot be decoded."""

from __future__ import annotations

import json

from tests.channels.telegram_harness import OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI, TranscriptSegment
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
    assert (request["model"], request["file"], request["responseFormat"]) == ("whisper-large", OGG, "verbose_json")
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


UNCLEAR = 'The recording was hard to make out; I heard: "{text}". If that is wrong, please say it again.'


async def test_a_transcript_the_model_was_unsure_of_is_shown_back(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.transcript = "book a table for for tomorrow"
    fake_openai.transcript_duration = 3.0
    # Whisper's own doubt: a mean log-probability under -1 (weighted by length: -1.27 here).
    fake_openai.transcript_segments = [
        TranscriptSegment(0.0, 1.0, avg_logprob=-0.3),
        TranscriptSegment(1.0, 3.0, avg_logprob=-1.75),
    ]
    fake_openai.script("For how many people?")
    fake_telegram.push_voice(OWNER, content=OGG, duration=3)
    echo, answer = await replies(fake_telegram, 2)
    assert echo == UNCLEAR.format(text="book a table for for tomorrow")
    assert answer == "For how many people?"
    assert fake_openai.user_texts() == ["book a table for for tomorrow"]  # still answered, as heard


async def test_a_transcript_of_mostly_no_speech_is_shown_back(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.transcript = "Thank you."  # what Whisper tends to "hear" in street noise
    fake_openai.transcript_duration = 8.0
    fake_openai.transcript_segments = [
        TranscriptSegment(0.0, 2.0, avg_logprob=-0.4, no_speech_prob=0.1),
        TranscriptSegment(2.0, 8.0, avg_logprob=-0.5, no_speech_prob=0.85),
    ]
    fake_openai.script("You're welcome.")
    fake_telegram.push_voice(OWNER, content=OGG, duration=8)
    echo, _ = await replies(fake_telegram, 2)
    assert echo == UNCLEAR.format(text="Thank you.")


async def test_a_confident_short_transcript_is_not_shown_back(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.transcript = "yes"
    fake_openai.transcript_duration = 6.0  # a long pause around one clear word is not doubt
    fake_openai.transcript_segments = [TranscriptSegment(0.0, 6.0, avg_logprob=-0.1, no_speech_prob=0.2)]
    fake_openai.script("Great.")
    fake_telegram.push_voice(OWNER, content=OGG, duration=6)
    assert await replies(fake_telegram, 1) == ["Great."]


async def test_an_endpoint_refusing_verbose_json_is_asked_for_plain_text(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"transcriptionModel": "gpt-4o-transcribe"}})
    fake_openai.verbose_json_supported = False
    fake_openai.transcript = "call mum"
    fake_openai.script("Calling reminder set.", "Noted.")
    # Without confidence figures, few words for a long clip are the signal: 2 words in 20 s.
    fake_telegram.push_voice(OWNER, content=OGG, duration=20)
    echo, answer = await replies(fake_telegram, 2)
    assert echo == UNCLEAR.format(text="call mum") and answer == "Calling reminder set."
    # A short clip with as many words is clear; verbose_json is not asked for again.
    fake_telegram.push_voice(OWNER, content=OGG, duration=2)
    assert (await replies(fake_telegram, 3))[-1] == "Noted."
    formats = [request["responseFormat"] for request in fake_openai.transcription_requests()]
    assert formats == ["verbose_json", "", ""]
    assert fake_openai.user_texts() == ["call mum", "call mum"]


async def test_verbose_json_without_segments_falls_back_to_the_word_rate(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.transcript = "hmm"
    fake_openai.transcript_duration = 12.0  # the endpoint's duration is used: Telegram's says 0
    fake_openai.transcript_segments = []
    fake_openai.script("Sorry?")
    fake_telegram.push_voice(OWNER, content=OGG, duration=0)
    echo, _ = await replies(fake_telegram, 2)
    assert echo == UNCLEAR.format(text="hmm")

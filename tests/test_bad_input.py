"""Bad input gets a clear answer and loses nothing: huge messages, a huge MEMORY.md, Unicode oddities."""

from __future__ import annotations

import json
from pathlib import Path

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say


async def test_a_100000_character_message_is_answered_and_kept_whole(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    huge = "".join(f"line {n}: all work and no play makes Jack a dull boy\n" for n in range(1900))[:100_000]
    assert len(huge) == 100_000
    assert (await say(services, channel, "1", huge)).startswith("echo: line 0")
    sent = fake_openai.last_chat_request()["messages"][-1]["content"]
    assert sent == huge
    archived = [json.loads(line) for line in (workspace_dir / "sessions" / "archive" / "test:1.jsonl").open()]
    assert archived[0]["content"] == huge


async def test_a_10_mb_memory_file_is_cut_to_its_budget_with_a_marker(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services.workspace.memory.long_term_file.write_text("The owner's name is Ann.\n" + "filler fact. " * 800_000)
    await say(services, channel, "1", "hello")
    system = fake_openai.system_prompts()[-1]
    assert system is not None
    assert "The owner's name is Ann." in system
    # The model is told there is more, and that the rest comes in when a message is about it.
    assert "more characters, over its share of the prompt: the parts relevant to each message" in system
    assert len(system) < 40_000  # the memory share of the budget, not 10 MB


async def test_unicode_oddities_survive_the_round_trip(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    odd = "zero\u200bwidth, \u202eRTL override\u202c, family 👩\u200d👩\u200d👧\u200d👦, flag 🇵🇹, combining e\u0301"
    assert await say(services, channel, "1", odd) == f"echo: {odd}"
    lone = "a lone surrogate \ud83d here"
    assert await say(services, channel, "1", lone) == "echo: a lone surrogate \ufffd here"
    stored = json.loads((workspace_dir / "sessions" / "test:1.json").read_text(encoding="utf-8"))
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [odd, "a lone surrogate \ufffd here"]

"""Bad input gets a clear answer and loses nothing: huge messages, a huge MEMORY.md, Unicode oddities."""

from __future__ import annotations

import json
from pathlib import Path

from bot.app import Application
from tests.conftest import env_for
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


async def test_a_session_file_cut_mid_way_is_kept_aside_the_person_is_told_and_the_chat_goes_on(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    first = Application(env_for(workspace_dir, fake_openai))
    await say(first, RecordingChannel(), "1", "my locker is 42")
    await first.stop()
    session_file = workspace_dir / "sessions" / "test:1.json"
    cut = session_file.read_text()[: session_file.stat().st_size // 2]  # an editor's crash, a full disk
    session_file.write_text(cut)

    restarted = Application(env_for(workspace_dir, fake_openai))
    try:
        channel = RecordingChannel()
        await restarted.router.accept(channel.message("1", "what is my locker?"), channel)
        notice, reply = await channel.wait_for("1", 2)
        [kept] = (workspace_dir / "sessions").glob("test:1.json.corrupt-*")
        assert notice == (
            "Your previous conversation file was damaged, so I started a fresh one. "
            f"The damaged file was kept as {kept.name}; your memory files are untouched."
        )
        assert reply == "echo: what is my locker?"
        assert kept.read_text() == cut  # the person's file, as it was
        archived = (workspace_dir / "sessions" / "archive" / "test:1.jsonl").read_text()
        assert "my locker is 42" in archived  # every earlier message is still in the archive
    finally:
        await restarted.stop()

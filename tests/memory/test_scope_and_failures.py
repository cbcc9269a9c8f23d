"""`memory.scope`: one memory for the owner, or one per chat with nothing shared; and fail-safe writes."""

from __future__ import annotations

import logging

import pytest

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, memory_section, say


async def test_global_scope_shares_memory_across_chats(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "alice", "My name is Ann.")
    await say(services, channel, "other", "what is my name?")
    assert "My name is Ann." in (memory_section(fake_openai.system_prompts()[-1]) or "")


async def test_chat_scope_keeps_each_chats_memory_apart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, scope="chat")
    await say(services, channel, "a", "My name is Ann. Remember that the vault code is 4711.")
    await say(services, channel, "a", "/new")
    await say(services, channel, "a", "what is the vault code?")
    assert "4711" in (memory_section(fake_openai.system_prompts()[-1]) or "")

    await say(services, channel, "b", "what is the vault code? and my name?")
    prompt_b = fake_openai.system_prompts()[-1] or ""
    assert "4711" not in prompt_b and "Ann" not in prompt_b

    chat_a = services.workspace.memory_dir / "chats" / "test:a"
    assert (chat_a / "items" / "semantic.jsonl").exists()
    notes_b = list((services.workspace.memory_dir / "chats" / "test:b").glob("*.md"))
    assert len(notes_b) == 1 and "4711" not in notes_b[0].read_text()
    assert not list(services.workspace.memory_dir.glob("????-??-??.md"))  # nothing in the global memory


async def test_a_disk_error_is_one_warning_and_the_reply_is_delivered(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # Running as root ignores permissions, so the files are made impossible to write another way.
    today = services.clock.now().date()
    services.workspace.memory.daily_note_file(today).mkdir(parents=True)
    (services.workspace.memory.items_dir / "episodic" / f"{today.isoformat()}.jsonl").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        assert await say(services, channel, "1", "hello") == "echo: hello"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if w.startswith("[MemoryPersist] Could not append the daily note")]) == 1
    assert len([w for w in warnings if w.startswith("[MemoryPersist] Could not write the memory items")]) == 1
    assert await say(services, channel, "1", "still there?") == "echo: still there?"


async def test_an_unreadable_memory_file_does_not_stop_the_answer(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services.workspace.memory.long_term_file.unlink(missing_ok=True)
    services.workspace.memory.long_term_file.mkdir()
    assert await say(services, channel, "1", "hello") == "echo: hello"
    assert "# Memory" not in (fake_openai.system_prompts()[-1] or "")


async def test_forgetting_a_fact_also_removes_it_from_the_knowledge_graph(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(
        services, channel, "1", "Remember that the garage door code is 4242, please keep it for me somewhere safe."
    )
    rag_files = services.workspace.rag_dir
    assert any("4242" in path.read_text() for path in rag_files.rglob("*") if path.is_file())

    listing = await say(services, channel, "1", "/memory garage door code")
    item_id = next(word for word in listing.split() if word.strip("[]").startswith("m") and len(word.strip("[]")) == 12)
    assert "Forgotten" in await say(services, channel, "1", f"/memory forget {item_id.strip('[]')}")
    assert not any("4242" in path.read_text() for path in rag_files.rglob("*") if path.is_file())

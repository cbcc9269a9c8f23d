"""Settings not marked read-at-start apply on the next message: changed in runtime-config.json between two
messages, the second one shows the change, with no restart.

A sample across the sections, beside the ones other tests already change between two messages:
`memory.enabled` (tests/memory/test_memory_prompt.py), `skills.*` (tests/skills), `web.*` (tests/tools/test_web.py),
`mcpServers` and `mcp.enabled` (tests/tools/test_mcp.py), `rag.flushIntervalSeconds` and `rag.cosineThreshold`
(tests/rag/test_fresh_facts.py), `access.allowedUsers` (tests/reliability/test_security.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.pipeline.systems.tool_loop import iteration_cap_reply
from bot.runtime_config import deep_merge
from bot.settings import read_at_start_keys
from tests.channels.telegram_harness import GROUP, TEST_RUNTIME_CONFIG, start_bot
from tests.compaction.helpers import is_summary_request
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import FakeTelegram


def write_config(path: Path, config: dict[str, Any]) -> None:
    path.write_text(json.dumps(config))
    stamp = time.time_ns() + 1_000_000_000  # seen as a change even within one filesystem timestamp tick
    os.utime(path, ns=(stamp, stamp))


async def say(services: Application, channel: RecordingChannel, text: str) -> str:
    before = len(channel.sent["1"])
    await services.router.accept(channel.message("1", text), channel)
    return (await channel.wait_for("1", before + 1))[-1]


def system_text(fake_openai: FakeOpenAI) -> str:
    """Every system message of the last conversation request (the turn's own parts come after the history)."""
    messages = fake_openai.last_chat_request()["messages"]
    return "\n".join(str(m["content"]) for m in messages if m["role"] == "system")


@dataclass(frozen=True)
class LiveCase:
    """A setting, the value it is changed to, and what the bot shows of it after a message, before and after."""

    key: str
    value: Any
    observe: Callable[[FakeOpenAI, str], Any]
    before: Any
    after: Any
    message: str = "what do you know?"
    setup: Callable[[Application, FakeOpenAI], Awaitable[None]] | None = None


async def notes_of_today_and_yesterday(services: Application, fake_openai: FakeOpenAI) -> None:
    today = services.clock.now().date()
    notes = services.workspace.memory
    notes.daily_note_file(today).write_text("[08:00] User: the plumber comes at NOON | Assistant: Noted.\n")
    notes.daily_note_file(today - timedelta(days=1)).write_text("[09:00] User: bought BLUE paint | Assistant: Ok.\n")


async def a_long_memory(services: Application, fake_openai: FakeOpenAI) -> None:
    services.workspace.memory.long_term_file.write_text(
        "\n".join(f"- Fact {n}: the owner's item {n} is kept in box {n}." for n in range(400))
    )


async def a_long_conversation(services: Application, fake_openai: FakeOpenAI) -> None:
    channel = RecordingChannel()
    for number in range(12):
        await say(services, channel, f"Turn {number}: " + "words " * 60)


async def a_tool_call_before_each_answer(services: Application, fake_openai: FakeOpenAI) -> None:
    read = Reply(tool_calls=[ToolCallSpec("list_files", {"path": "."}, id="call_1")])
    fake_openai.script(read, "done", read, "done")


def memory_lines(fake_openai: FakeOpenAI) -> int:
    return system_text(fake_openai).count("- Fact ")


def kept_by_compact(reply: str) -> str:
    found = re.search(r"kept (\d+)", reply)
    return found.group(1) if found else reply


CASES = [
    LiveCase("llm.temperature", 0.2, lambda f, r: f.last_chat_request()["temperature"], 0.7, 0.2),
    LiveCase("llm.model", "gpt-4.1-mini", lambda f, r: f.last_chat_request()["model"], "gpt-4o-mini", "gpt-4.1-mini"),
    LiveCase(
        "memory.legacyDailyNotesEnabled",
        False,
        lambda f, r: "NOON" in system_text(f),
        True,
        False,
        setup=notes_of_today_and_yesterday,
    ),
    LiveCase(
        "memory.recentDays",
        0,
        lambda f, r: "BLUE paint" in system_text(f),
        True,
        False,
        setup=notes_of_today_and_yesterday,
    ),
    LiveCase(
        "memory.maxPromptBudgetTokens",
        400,
        lambda f, r: memory_lines(f) > 60,
        True,
        False,
        setup=a_long_memory,
    ),
    LiveCase(
        "compaction.budgetShares.memory",
        0.005,
        lambda f, r: memory_lines(f) > 60,
        True,
        False,
        setup=a_long_memory,
    ),
    LiveCase(
        "compaction.keepLastMessages",
        2,
        lambda f, r: kept_by_compact(r),
        "20",
        "2",
        message="/compact",
        setup=a_long_conversation,
    ),
    LiveCase(
        "compaction.maxContextTokens",
        1000,
        lambda f, r: any(is_summary_request(request) for request in f.chat_requests()),
        False,
        True,
        setup=a_long_conversation,
    ),
    LiveCase(
        "toolLoop.maxIterations",
        1,
        lambda f, r: r == iteration_cap_reply(1),
        False,
        True,
        setup=a_tool_call_before_each_answer,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.key for case in CASES])
async def test_a_setting_changed_between_two_messages_applies_to_the_second(
    case: LiveCase, services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    assert case.key not in read_at_start_keys()
    if case.setup is not None:
        await case.setup(services, fake_openai)
    reply = await say(services, channel, case.message)
    assert case.observe(fake_openai, reply) == case.before

    section, *path = case.key.split(".")
    value: Any = case.value
    for name in reversed(path):
        value = {name: value}
    write_config(services.workspace.runtime_config_file, {section: value})
    reply = await say(services, channel, case.message)

    assert case.observe(fake_openai, reply) == case.after


async def test_group_gating_changed_between_two_messages_applies_to_the_second(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        fake_telegram.push_message(GROUP, "talking among ourselves")  # not addressed to the bot: not answered
        fake_telegram.push_message(GROUP, "@test_bot are you there?")
        assert [m.text for m in await fake_telegram.await_messages(GROUP, 1)] == ["echo: User1001: are you there?"]
        write_config(
            workspace_dir / "preferences" / "runtime-config.json",
            deep_merge(TEST_RUNTIME_CONFIG, {"telegram": {"groups": {"answerAllMessages": True}}}),
        )
        fake_telegram.push_message(GROUP, "hello everyone")
        replies = await fake_telegram.await_messages(GROUP, 2)
        assert replies[-1].text == "echo: User1001: hello everyone"
    finally:
        await bot.stop()

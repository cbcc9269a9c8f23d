"""Fresh facts reach the graph soon: indexing starts when the chat is quiet, and the intervals apply live."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, queued_count, rag_of, say
from tests.waiting import wait_until

FACT = "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now."


async def indexed(services: Application) -> int:
    return (await rag_of(services).store.counts())["indexed"]


async def test_an_exchange_is_indexed_once_the_chat_is_quiet_not_after_the_interval(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"idleFlushSeconds": 0.5, "flushIntervalSeconds": 3600})
    await services.start()
    try:
        await say(services, channel, "1", FACT)

        async def in_the_graph() -> bool:
            return await indexed(services) == 1

        await wait_until(in_the_graph, timeout=10)
    finally:
        await services.stop()


async def test_a_changed_flush_interval_applies_without_a_restart(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"idleFlushSeconds": 3600, "flushIntervalSeconds": 3600})
    await services.start()
    try:
        await say(services, channel, "1", FACT)
        assert await indexed(services) == 0
        config_file = services.workspace.runtime_config_file
        config = json.loads(config_file.read_text())
        config["rag"]["flushIntervalSeconds"] = 1
        config_file.write_text(json.dumps(config))
        stamp = config_file.stat().st_mtime_ns + 1_000_000_000
        os.utime(config_file, ns=(stamp, stamp))
        await services.config_store.current()  # what the next message (or the 5 s check) does

        async def in_the_graph() -> bool:
            return await indexed(services) == 1

        await wait_until(in_the_graph, timeout=10)
    finally:
        await services.stop()


async def test_a_changed_cosine_threshold_applies_to_the_next_message(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"queryMode": "hybrid", "cosineThreshold": 0.2})
    try:
        await say(services, channel, "1", FACT)

        async def queued() -> bool:
            return await queued_count(services) == 1

        await wait_until(queued, timeout=10)
        assert await rag_of(services).flush() == 1
        await say(services, channel, "2", "Where does Marta work these days?")  # another chat: no history
        assert "Gulbenkian" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[-1]

        config_file = services.workspace.runtime_config_file
        config = json.loads(config_file.read_text())
        config["rag"]["cosineThreshold"] = 0.999  # nothing is that close: the graph finds nothing
        config_file.write_text(json.dumps(config))
        await say(services, channel, "3", "Where does Marta work these days?")
        assert "# Relevant Memory" not in (fake_openai.system_prompts()[-1] or "")
    finally:
        await services.stop()

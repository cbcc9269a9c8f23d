"""At start the knowledge graph is opened in the background, so the first message does not wait for it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, queued_count, rag_of, say
from tests.waiting import wait_until

FACT = "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now."


async def test_a_start_opens_the_graph_before_the_first_message(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, caplog: pytest.LogCaptureFixture
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai)
    try:
        await say(services, channel, "1", FACT)

        async def queued() -> bool:
            return await queued_count(services) == 1

        await wait_until(queued, timeout=10)
        assert await rag_of(services).flush() == 1
    finally:
        await services.stop()

    caplog.set_level(logging.INFO, logger="bot.rag")
    services = build_rag_bot(workspace_dir, fake_openai)
    await services.start()
    try:

        async def opened() -> bool:
            return any("Opened 1 graphs" in record.getMessage() for record in caplog.records)

        await wait_until(opened, timeout=20)  # no message was sent
        assert sum("LightRAG workspace global opened" in r.getMessage() for r in caplog.records) == 1
        await say(services, channel, "2", "Where does Marta work these days?")
        assert "Gulbenkian" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[-1]
        assert sum("LightRAG workspace global opened" in r.getMessage() for r in caplog.records) == 1
    finally:
        await services.stop()


async def test_an_empty_graph_is_not_opened_at_start(
    workspace_dir: Path, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.rag")
    services = build_rag_bot(workspace_dir, fake_openai)
    await services.start()
    try:
        warming = services.rag.warm_up()  # the task the start began
        assert warming is not None
        await warming
        assert not any("LightRAG workspace" in record.getMessage() for record in caplog.records)
    finally:
        await services.stop()

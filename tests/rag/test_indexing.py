"""RagIndexingSystem (55): exchanges go on the durable queue after the reply; the scheduler's flush indexes them."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, lightrag_responder, queued_count, rag_of, say
from tests.waiting import wait_until


async def test_an_exchange_is_queued_after_the_reply_and_indexed_by_the_flush(
    rag_bot: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    await say(rag_bot, channel, "1", "My sister Marta moved to Lisbon last week, she loves it there.")
    await wait_until(lambda: _has_queued(rag_bot))
    # Queued durably, with the date and the chat in the text; no extraction call on the reply path.
    lines = [json.loads(line) for line in (workspace_dir / "rag" / "documents.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["status"] == "queued"
    assert re.fullmatch(r"conv_test_1_\d{8}_\d{6}", lines[0]["id"])
    assert lines[0]["text"].startswith("Conversation in chat test:1 on 20")
    assert "Marta moved to Lisbon" in lines[0]["text"]
    assert len(fake_openai.chat_requests()) == 1

    assert await rag_of(rag_bot).flush() == 1
    status = await rag_of(rag_bot).status()
    assert (status.indexed, status.queued, status.last_error) == (1, 0, None)
    assert "1 documents indexed, 0 queued" in status.describe()
    assert (workspace_dir / "rag" / "global" / "kv_store_full_docs.json").is_file()


async def _has_queued(services: Application) -> bool:
    return await queued_count(services) > 0


async def test_greetings_and_short_exchanges_are_not_indexed(
    rag_bot: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("Hello! How can I help you today? I am here for anything you need.", "ok")
    await say(rag_bot, channel, "1", "hi!")
    await say(rag_bot, channel, "1", "thx")
    await say(rag_bot, channel, "1", "My dentist appointment is on the 14th at 9am, please keep that in mind.")
    await wait_until(lambda: _has_queued(rag_bot))
    assert (await rag_of(rag_bot).store.counts())["queued"] == 1


async def test_slow_indexing_never_delays_the_reply(
    rag_bot: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    extracting, release = threading.Event(), threading.Event()

    def held_extraction(request: dict[str, Any]) -> Reply:
        reply = lightrag_responder(request)
        if request.get("messages", [{}])[0].get("role") == "system" and "Knowledge Graph" in str(request):
            extracting.set()
            return Reply(text=reply.text, held_until=release)
        return reply

    fake_openai.set_responder(held_extraction)
    await say(rag_bot, channel, "1", "The Falcon launch was moved to Friday morning at the Cape.")
    await wait_until(lambda: _has_queued(rag_bot))

    # The scheduler's job runs this same flush in the background; here the test starts it itself.
    indexing = asyncio.create_task(rag_of(rag_bot).flush())
    try:
        await wait_until(_is_set(extracting))
        await say(rag_bot, channel, "1", "And what about the Starship test in Texas next month?")
        assert not indexing.done()  # the reply came while the extraction call was still held
    finally:
        release.set()
    assert await indexing == 1


def _is_set(event: threading.Event) -> Callable[[], Awaitable[bool]]:
    async def is_set() -> bool:
        return event.is_set()

    return is_set


async def test_the_scheduler_flushes_the_queue_in_the_background(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"flushIntervalSeconds": 1.0})
    rag = rag_of(services)
    services.scheduler.start()
    try:
        await say(services, channel, "1", "The Orion review moved to Thursday at three in the afternoon.")

        async def indexed() -> bool:
            return (await rag.status()).indexed == 1

        await wait_until(indexed, timeout=10.0)
    finally:
        await services.stop()
        await rag.close()

"""A chat's exchanges are indexed together: one extraction call for a quiet stretch, not one per exchange;
greetings and acknowledgements cost nothing; each fact still traces to its exchange."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.rag.documents import is_small_talk
from tests.fakes.openai_server import FakeOpenAI, Reply, message_text
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, lightrag_responder, queued_count, rag_of, say
from tests.waiting import wait_until

FACTS = [
    "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now.",
    "Our dog Biscuit has a vet appointment at Greenfield Clinic on Tuesday.",
    "I started learning the cello with a teacher called Ingrid, lessons are on Saturdays.",
]


def extractions(fake_openai: FakeOpenAI) -> list[dict[str, Any]]:
    """The entity-extraction requests LightRAG made."""
    return [
        request
        for request in fake_openai.chat_requests()
        if any("Knowledge Graph Specialist" in message_text(m.get("content")) for m in request["messages"])
    ]


def input_text(request: dict[str, Any]) -> str:
    return message_text(request["messages"][-1]["content"]).rsplit("---Input Text---", 1)[-1]


async def queued(services: Application, count: int) -> None:
    async def enough() -> bool:
        return await queued_count(services) == count

    await wait_until(enough)


async def test_a_quiet_stretch_of_exchanges_is_one_extraction_call(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"idleFlushSeconds": 3600, "flushIntervalSeconds": 3600})
    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)
        await queued(services, 3)
        assert extractions(fake_openai) == []  # nothing on the reply path

        assert await rag_of(services).flush() == 3
        [extraction] = extractions(fake_openai)
        text = input_text(extraction)
        # Every exchange is in the one call, each under its own date-and-chat line.
        assert text.count("Conversation in chat test:1 on ") == 3
        assert all(fact in text for fact in FACTS)
        status = await rag_of(services).status()
        assert (status.indexed, status.queued) == (3, 0)
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_without_batching_each_exchange_is_its_own_extraction_call(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"batchTokens": 0, "idleFlushSeconds": 3600})
    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)
        await queued(services, 3)
        assert await rag_of(services).flush() == 3
        assert len(extractions(fake_openai)) == 3
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_each_fact_traces_to_its_exchange_and_forgetting_one_keeps_the_others(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(
        workspace_dir, fake_openai, {"idleFlushSeconds": 3600, "flushIntervalSeconds": 3600}, memory={"enabled": False}
    )
    rag = rag_of(services)
    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)
        await queued(services, 3)
        assert await rag.flush() == 3

        # The store keeps each exchange with the id of the graph document it went into, and the graph's
        # chunk names that document and holds each exchange under its own date-and-chat line.
        records = {doc.id: doc for doc in await rag.store.find(session_id="test:1")}
        [batch_id] = {doc.backend_id for doc in records.values()}
        assert batch_id is not None and batch_id not in records
        chunks = json.loads((workspace_dir / "rag" / "global" / "kv_store_text_chunks.json").read_text())
        [chunk] = chunks.values()
        assert chunk["full_doc_id"] == batch_id and chunk["file_path"] == batch_id
        for doc in records.values():
            assert doc.text in chunk["content"]
        entities = json.loads((workspace_dir / "rag" / "global" / "kv_store_full_entities.json").read_text())
        assert "Biscuit" in json.dumps(entities[batch_id])

        session = await services.sessions.get("test:1")
        assert session is not None
        dog = next(m for m in session.messages if "Biscuit" in m.content)
        doc_ids = await rag.documents_for_messages([dog.id])
        assert len(doc_ids) == 1 and await rag.forget_documents(doc_ids) == doc_ids

        # The batch's document is gone with the dog; the other two exchanges are in the graph again.
        assert len(extractions(fake_openai)) == 2
        assert "Biscuit" not in input_text(extractions(fake_openai)[-1])
        status = await rag.status()
        assert (status.indexed, status.queued) == (2, 0)
        await say(services, channel, "1", "/new")  # out of the live session: only the graph has them now
        await say(services, channel, "1", "Where does Marta work, and who teaches me the cello?")
        relevant = (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[-1]
        assert "Gulbenkian" in relevant and "Ingrid" in relevant
        on_disk = "".join(p.read_text(errors="replace") for p in (workspace_dir / "rag").rglob("*") if p.is_file())
        assert "Biscuit" not in on_disk and "Greenfield" not in on_disk
    finally:
        await services.stop()
        await rag.close()


async def test_a_full_batch_is_indexed_at_once_and_the_rest_waits_for_the_quiet(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    # Two exchanges fill a batch here; the quiet stretch and the interval are an hour.
    services = build_rag_bot(
        workspace_dir, fake_openai, {"batchTokens": 150, "idleFlushSeconds": 3600, "flushIntervalSeconds": 3600}
    )
    rag = rag_of(services)
    services.scheduler.start()
    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)

        async def first_batch_indexed() -> bool:
            return (await rag.store.counts())["indexed"] == 2

        # LightRAG's first insert imports it and builds its storages: slow on a loaded machine.
        await wait_until(first_batch_indexed, timeout=30)
        assert len(extractions(fake_openai)) == 1
        assert await queued_count(services) == 1  # the third waits for more, or for the quiet
    finally:
        await services.stop()
        await rag.close()


async def test_greetings_and_acknowledgements_cost_no_call(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    # Every exchange would be long enough: only what the user said decides.
    services = build_rag_bot(workspace_dir, fake_openai, {"minExchangeChars": 0})
    try:
        for text in ("Hi there!", "ok, got it, thanks a lot!", "Thank you so much, that makes sense 👍", "cool"):
            await say(services, channel, "1", text)
        await say(services, channel, "1", FACTS[0])
        await queued(services, 1)
        assert await rag_of(services).flush() == 1
        [extraction] = extractions(fake_openai)
        assert "Marta" in input_text(extraction) and "thanks" not in input_text(extraction).lower()
    finally:
        await services.stop()
        await rag_of(services).close()


@pytest.mark.parametrize(
    "text",
    ["hi", "Hello!", "ok thanks", "Thanks a lot, that helps!", "got it", "I see, makes sense.", "Perfect, thank you!",
     "ok cool 👍", "Спасибо!", "alright, sounds good", "I’m glad, thanks"],
)  # fmt: skip
def test_small_talk_has_nothing_to_extract(text: str) -> None:
    assert is_small_talk(text)


@pytest.mark.parametrize(
    "text",
    ["I'm 34", "My name is Bob", "I live in Paris now", "thanks, my flight is at 7", "ok, call me Sasha",
     "Got a new job at Siemens", "no peanuts for me, I'm allergic"],
)  # fmt: skip
def test_a_message_with_something_to_remember_is_not_small_talk(text: str) -> None:
    assert not is_small_talk(text)


async def test_the_extraction_prompt_starts_with_the_same_text_every_call(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    """What a provider's prompt cache can serve: the system message and the user message up to the input."""
    services = build_rag_bot(workspace_dir, fake_openai, {"batchTokens": 0, "idleFlushSeconds": 3600})
    try:
        await say(services, channel, "1", FACTS[0])
        await say(services, channel, "1", FACTS[1])
        await queued(services, 2)
        assert await rag_of(services).flush() == 2
        first, second = extractions(fake_openai)
        assert first["messages"][0] == second["messages"][0] and first["messages"][0]["role"] == "system"
        prefix = [message_text(r["messages"][-1]["content"]).split("---Input Text---")[0] for r in (first, second)]
        assert prefix[0] == prefix[1]
        assert first["model"] == second["model"]
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_the_extraction_goes_to_a_fast_model_the_owner_set_up_and_status_names_it(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    (workspace_dir / "preferences").mkdir(parents=True, exist_ok=True)
    tiny = {"maxInputTokens": 128000, "maxOutputTokens": 16384, "tier": "fast"}
    (workspace_dir / "preferences" / "models.json").write_text(json.dumps({"models": {"tiny-extractor": tiny}}))
    services = build_rag_bot(
        workspace_dir, fake_openai, {"idleFlushSeconds": 3600}, llm={"models": ["big-thinker", "tiny-extractor"]}
    )
    try:
        await say(services, channel, "1", FACTS[0])
        await queued(services, 1)
        assert await rag_of(services).flush() == 1
        [extraction] = extractions(fake_openai)
        assert extraction["model"] == "tiny-extractor"
        assert fake_openai.chat_requests()[0]["model"] == "gpt-4o-mini"  # the reply: the chat model
        assert "extraction model tiny-extractor" in await say(services, channel, "1", "/status")
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_relevant_memory_shows_the_exchange_of_a_batch_that_answers(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"idleFlushSeconds": 3600}, memory={"enabled": False})
    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)
        await queued(services, 3)
        assert await rag_of(services).flush() == 3
        await say(services, channel, "1", "/new")
        await say(services, channel, "1", "When is Biscuit's vet appointment?")
        relevant = (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[-1]
        # The dog's exchange, under its own date-and-chat line; not the rest of its batch.
        assert "Conversation in chat test:1 on " in relevant and "Greenfield Clinic on Tuesday" in relevant
        assert "Ingrid" not in relevant and "Gulbenkian" not in relevant
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_a_stop_in_the_middle_of_an_extraction_loses_nothing_and_logs_no_error(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, caplog: pytest.LogCaptureFixture
) -> None:
    settings = {"idleFlushSeconds": 3600, "flushIntervalSeconds": 3600}
    services = build_rag_bot(workspace_dir, fake_openai, settings)

    def slow_extraction(request: dict[str, Any]) -> Reply:
        reply = lightrag_responder(request)
        extracting = any("Knowledge Graph Specialist" in message_text(m.get("content")) for m in request["messages"])
        return Reply(text=reply.text, delay=30.0 if extracting else 0.0)

    try:
        for fact in FACTS:
            await say(services, channel, "1", fact)
        await queued(services, 3)
        fake_openai.set_responder(slow_extraction)
        flushing = asyncio.create_task(rag_of(services).flush())

        async def extracting() -> bool:
            return bool(extractions(fake_openai))

        await wait_until(extracting, timeout=30)
        flushing.cancel()  # as the stop of the scheduler that runs it does
        with contextlib.suppress(asyncio.CancelledError):
            await flushing
    finally:
        await services.stop()
        await rag_of(services).close()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []

    fake_openai.set_responder(lightrag_responder)
    again = build_rag_bot(workspace_dir, fake_openai, settings)
    try:
        assert await rag_of(again).flush() == 3  # what the stop cut short is indexed at the next start
        assert (await rag_of(again).status()).queued == 0
    finally:
        await again.stop()
        await rag_of(again).close()

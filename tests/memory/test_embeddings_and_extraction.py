"""Hybrid retrieval with the endpoint's embeddings, the optional LLM extractor, and the compaction sink."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.domain.message import Message
from bot.llm.errors import LlmError, LlmFailure
from bot.memory.compaction_sink import PreCompactionMemory, pair_turns
from bot.memory.indexing import EmbedderState
from bot.memory.service import MemoryService
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, read_items, say, write_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def embedding_requests(fake_openai: FakeOpenAI) -> list[dict[str, object]]:
    return [r.json for r in fake_openai.requests if r.path == "/v1/embeddings" and isinstance(r.json, dict)]


async def test_with_an_embedding_model_retrieval_is_hybrid(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, embeddingsModel="fake-embedding")
    await say(services, channel, "1", "Remember that the garage door code is 9876.")
    await say(services, channel, "2", "open the garage door please")
    requests = embedding_requests(fake_openai)
    assert requests and all(r["model"] == "fake-embedding" for r in requests)
    embedded = [text for r in requests for text in (r["input"] if isinstance(r["input"], list) else [r["input"]])]
    assert "open the garage door please" in embedded  # the query
    assert "the garage door code is 9876." in embedded  # items, embedded once each
    assert embedded.count("the garage door code is 9876.") == 1
    assert "the garage door code is 9876." in (memory_section(fake_openai.system_prompts()[-1]) or "")
    status = await say(services, channel, "2", "/status")
    assert "(hybrid," in status


async def test_the_message_vector_leaves_out_the_names_of_people_who_speak_in_memory(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    """A name says whose lines matter (the speaker lift); in the vector it would draw every line that
    merely addresses that person. A name nobody speaks under stays in."""
    day = datetime(2026, 2, 10, 18, 0, tzinfo=UTC)
    lines = ["Ann: I moved to Lyon last spring.", "Bob: Thanks, Ann! Say hi to Toby for me."]
    write_items(
        services.workspace.memory.episodic_file(day.date()),
        [item(MemoryLayer.EPISODIC, text, day, type_="dialog_turn") for text in lines],
    )
    configure_memory(services, embeddingsModel="fake-embedding")
    await say(services, channel, "1", "hello")  # loads the items and embeds them
    await say(services, channel, "1", "Where does Ann live, and how is Toby?")
    embedded = [
        text
        for r in embedding_requests(fake_openai)
        for text in (r["input"] if isinstance(r["input"], list) else [r["input"]])
    ]
    assert "Where does live, and how is Toby?" in embedded
    assert "Where does Ann live, and how is Toby?" not in embedded
    section = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "Ann: I moved to Lyon last spring." in section


class FailingEmbedder:
    name = "broken-model"

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        raise LlmError(LlmFailure.UNREACHABLE, "connection refused")

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]


async def test_a_failing_embedding_endpoint_means_lexical_only_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = EmbedderState()
    embedder = FailingEmbedder()
    with caplog.at_level(logging.WARNING):
        assert await state.embed_query(embedder, "query") is None
        assert await state.embed_query(embedder, "query again") is None  # paused: no second call
    assert embedder.calls == 1
    assert len([r for r in caplog.records if "Embeddings from broken-model failed" in r.getMessage()]) == 1


async def test_the_llm_extractor_is_used_when_enabled_and_the_rules_when_it_fails(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, llmExtractionEnabled=True)
    extracted = {"items": [{"layer": "SEMANTIC", "type": "fact", "content": "The user owns a red bike.",
                            "key": "bike", "confidence": 0.9}]}  # fmt: skip
    fake_openai.script("Nice bike!", json.dumps(extracted))
    await say(services, channel, "1", "Got myself a new bicycle, it's red")
    semantic = read_items(services.workspace.memory.items_dir / "semantic.jsonl")
    assert [(r["content"], r["key"]) for r in semantic] == [("The user owns a red bike.", "bike")]
    extraction_request = fake_openai.chat_requests()[-1]
    assert extraction_request["messages"][0]["content"].startswith("You extract long-term memory")

    fake_openai.script("Hi Ann!", "Sure, here are your facts: none")  # prose instead of JSON
    await say(services, channel, "1", "My name is Ann.")
    semantic = read_items(services.workspace.memory.items_dir / "semantic.jsonl")
    assert "My name is Ann." in [r["content"] for r in semantic]  # the rules took over


async def test_turns_about_to_be_compacted_reach_memory_first(services: Application) -> None:
    memory = MemoryService(services.workspace, services.clock, services.llm)
    sink = PreCompactionMemory(memory, services.config_store)
    configure_memory(services, legacyDailyNotesEnabled=True)
    messages = [
        Message.user("My name is Ann."),
        Message.assistant("Hello Ann."),
        Message.user("and?"),
        Message.assistant("", tool_calls=None),
        Message.assistant("Nothing else."),
    ]
    assert [(u.content, a.content) for u, a in pair_turns(messages)] == [
        ("My name is Ann.", "Hello Ann."),
        ("and?", "Nothing else."),
    ]
    await sink.remember_before_compaction("test:1", messages)
    await sink.remember_before_compaction("test:1", messages)  # already recorded: nothing twice
    episodic = [
        r for path in (services.workspace.memory.items_dir / "episodic").glob("*.jsonl") for r in read_items(path)
    ]
    assert sorted(r["content"] for r in episodic) == [
        "User: My name is Ann. | Assistant: Hello Ann.",
        "User: and? | Assistant: Nothing else.",
    ]
    assert [r["content"] for r in read_items(services.workspace.memory.items_dir / "semantic.jsonl")] == [
        "My name is Ann."
    ]

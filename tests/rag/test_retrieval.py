"""`# Relevant Memory` at ContextBuilding (20): the right content, within budget, deduplicated, never blocking."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.domain.message import ToolCall
from bot.tools.registry import ToolContext
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, rag_of, say
from tests.waiting import wait_until

MARTA = "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now."


async def remembered(services: Application, channel: RecordingChannel, chat_id: str = "1") -> None:
    """Tell the bot about Marta, and let the scheduler's flush index it."""
    await say(services, channel, chat_id, MARTA)
    rag = rag_of(services)

    async def queued() -> bool:  # RagIndexing (55) runs just after the reply is sent
        return (await rag.store.counts())["queued"] == 1

    await wait_until(queued)
    assert await rag.flush() == 1


@pytest.fixture
async def bot_without_memory(workspace_dir: Path, fake_openai: FakeOpenAI) -> Any:
    built = build_rag_bot(workspace_dir, fake_openai, memory={"enabled": False})
    yield built
    await built.stop()
    await rag_of(built).close()


async def test_relevant_memory_brings_back_a_past_exchange(
    bot_without_memory: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await remembered(bot_without_memory, channel)
    await say(bot_without_memory, channel, "1", "/new")
    chats_before = len(fake_openai.chat_requests())
    await say(bot_without_memory, channel, "1", "Where does Marta live now?")

    system = fake_openai.system_prompts()[-1] or ""
    assert "# Relevant Memory" in system
    relevant = system.split("# Relevant Memory", 1)[1]
    assert "Marta moved to Lisbon" in relevant and "Conversation in chat test:1 on " in relevant
    # `naive` mode: the answer was the only model call of the turn.
    assert len(fake_openai.chat_requests()) == chats_before + 1


async def test_relevant_memory_stays_within_its_token_budget(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"maxContextTokens": 60}, memory={"enabled": False})
    try:
        await remembered(services, channel)
        await say(services, channel, "1", "/new")  # the live session would show the fact already
        await say(services, channel, "1", "Marta museum Lisbon?")
        system = fake_openai.system_prompts()[-1] or ""
        relevant = "# Relevant Memory" + system.split("# Relevant Memory", 1)[1]
        assert TokenEstimator().text(relevant) <= 60
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_relevant_memory_is_chosen_within_the_share_the_context_plan_gives_it(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    # rag.maxContextTokens stays at its default; the plan's RAG share (0.03 of 2,000 tokens) is smaller.
    compaction = {"maxContextTokens": 2000, "budgetShares": {"rag": 0.03}}
    services = build_rag_bot(workspace_dir, fake_openai, None, memory={"enabled": False}, compaction=compaction)
    try:
        await remembered(services, channel)
        await say(services, channel, "1", "/new")
        await say(services, channel, "1", "Marta museum Lisbon?")
        system = fake_openai.system_prompts()[-1] or ""
        relevant = "# Relevant Memory" + system.split("# Relevant Memory", 1)[1]
        assert TokenEstimator().text(relevant) <= 60
        assert "cut here" not in relevant  # chosen to fit, not cut afterwards
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_what_the_memory_pack_already_shows_is_not_repeated(
    rag_bot: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await remembered(rag_bot, channel)
    await say(rag_bot, channel, "1", "Where does Marta live now?")
    request = fake_openai.last_chat_request()["messages"]
    conversation = [m["content"] for m in request if m["role"] in ("user", "assistant")]
    assert any("Marta moved to Lisbon" in text for text in conversation)  # the live session has it
    system = fake_openai.system_prompts()[-1] or ""
    relevant = system.split("# Relevant Memory", 1)[1] if "# Relevant Memory" in system else ""
    assert "Conversation in chat test:1" not in relevant
    assert "Marta moved to Lisbon" not in system  # neither the notes nor the graph repeat it

    await say(rag_bot, channel, "1", "/new")  # out of the live session: now memory shows it, once
    await say(rag_bot, channel, "1", "Where does Marta live now?")
    system = fake_openai.system_prompts()[-1] or ""
    assert "Marta moved to Lisbon" in system.split("# Relevant Memory", 1)[0]
    relevant = system.split("# Relevant Memory", 1)[1] if "# Relevant Memory" in system else ""
    assert "Conversation in chat test:1" not in relevant


async def test_a_slow_retrieval_times_out_and_the_reply_goes_on(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, caplog: pytest.LogCaptureFixture
) -> None:
    rag = {"queryMode": "hybrid", "queryTimeoutSeconds": 0.3, "embeddingModel": "text-embedding-3-small"}
    services = build_rag_bot(workspace_dir, fake_openai, rag, memory={"enabled": False})
    try:
        await remembered(services, channel)
        fake_openai.embedding_delay = 2.0  # the endpoint's embeddings of the query are slow
        caplog.set_level(logging.INFO)
        reply = await say(services, channel, "1", "Where does Marta live now?")
        assert reply == "echo: Where does Marta live now?"
        assert "# Relevant Memory" not in (fake_openai.system_prompts()[-1] or "")
        assert "[RAG] Retrieval timed out after 0.3s (hybrid mode); answering without Relevant Memory" in caplog.text
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_hybrid_mode_finds_the_graph_facts(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"queryMode": "hybrid"}, memory={"enabled": False})
    try:
        await remembered(services, channel)
        await say(services, channel, "1", "What do you know about Marta?")
        relevant = (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[1]
        assert "## Facts" in relevant and "- Marta (concept): Marta was mentioned" in relevant
    finally:
        await services.stop()
        await rag_of(services).close()


async def test_the_rag_query_tool_searches_past_conversations(
    bot_without_memory: Application, channel: RecordingChannel
) -> None:
    await remembered(bot_without_memory, channel)
    config = await bot_without_memory.config_store.current()
    context = ToolContext(session_id="test:1", channel_type="test", chat_id="1", config=config)
    outcome = await bot_without_memory.tools.execute(
        ToolCall(id="call_1", name="rag_query", arguments='{"query": "Where does Marta work?", "mode": "naive"}'),
        context,
    )
    assert not outcome.is_error
    assert "Gulbenkian museum" in outcome.content
    assert "rag_query" in bot_without_memory.tools.names()


@pytest.mark.parametrize(("soft_tokens", "graph_shown"), [(1800, True), (40, False)])
async def test_the_graph_and_the_memory_pack_share_one_budget(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, soft_tokens: int, graph_shown: bool
) -> None:
    # The pack's items come first; the graph gets what they left of the soft budget, and nothing once the
    # pack has taken all of it (here its best match alone, which may go past the soft budget).
    memory = {"softPromptBudgetTokens": soft_tokens}
    services = build_rag_bot(workspace_dir, fake_openai, {"queryMode": "hybrid"}, memory=memory)
    try:
        await remembered(services, channel)
        await say(services, channel, "1", "/new")
        await say(services, channel, "1", "What do you know about Marta?")
        system = fake_openai.system_prompts()[-1] or ""
        recalled, _, relevant = system.partition("# Relevant Memory")
        pack = recalled[recalled.rindex("# Memory") :]
        assert "Marta moved to Lisbon" in pack
        assert ("- Marta (concept): Marta was mentioned" in relevant) is graph_shown
        if graph_shown:
            estimator = TokenEstimator()
            assert estimator.text(pack) + estimator.text("# Relevant Memory" + relevant) <= soft_tokens
    finally:
        await services.stop()
        await rag_of(services).close()

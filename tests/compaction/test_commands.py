"""/compact [N] [focus] and /context, as the user sees them and as the session file shows them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.app import Application
from tests.compaction.helpers import is_summary_request, say, structured_summary
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

FACTS = ["FACT-01 train day is FRIDAY", "FACT-02 hotel name is ASTORIA", "FACT-03 budget cap is EUR-900"]


def session_file(workspace: Path) -> dict[str, Any]:
    stored: dict[str, Any] = json.loads((workspace / "sessions" / "test:1.json").read_text())
    return stored


async def test_compact_2_with_a_focus_keeps_the_last_turn_and_writes_the_summary_first(
    small_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    for fact in FACTS:
        await say(small_services, channel, "1", f"For the trip: {fact}")
    before = session_file(workspace_dir)["messages"]
    archive = workspace_dir / "sessions" / "archive" / "test:1.jsonl"
    archived_before = archive.read_bytes()

    reply = await say(small_services, channel, "1", "/compact 2 the travel plans")

    assert reply.startswith("Compacted with an LLM summary: removed 4 messages, kept 2. Context ~")
    assert reply.endswith("tokens. Focus: the travel plans.")
    stored = session_file(workspace_dir)
    messages = stored["messages"]
    assert isinstance(messages, list) and len(messages) == 3
    assert messages[0]["role"] == "system"
    # The summary covers the two compacted turns; the third fact is in the kept turn.
    assert messages[0]["content"] == "[Conversation summary]\n" + structured_summary(FACTS[:2]).strip()
    assert messages[1:] == before[4:]  # the last turn, untouched: same ids, texts and timestamps
    metadata = stored["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["compactionCount"] == 1
    assert metadata["summary"] == structured_summary(FACTS[:2]).strip()
    event = metadata["compactionEvents"][-1]
    assert (event["reason"], event["method"], event["removed"], event["kept"]) == ("manual", "summary", 4, 2)
    assert event["messagesBefore"] == 6 and event["messagesAfter"] == 3 and event["tokensAfter"] < event["tokensBefore"]
    assert archive.read_bytes() == archived_before  # the archive is never rewritten

    [summary_request] = [r for r in fake_openai.chat_requests() if is_summary_request(r)]
    assert summary_request["messages"][0]["content"].endswith("IMPORTANT: Focus the summary on: the travel plans")

    await say(small_services, channel, "1", "and the hotel?")
    sent = fake_openai.last_chat_request()["messages"]
    # The system prompt, the summary, the kept turn, then what was made for this message and the message.
    assert [m["role"] for m in sent] == ["system", "system", "user", "assistant", "system", "user"]
    assert sent[1]["content"].startswith("[Conversation summary]\n## Goal")


async def test_compact_without_a_number_keeps_the_configured_count_and_says_when_there_is_nothing(
    small_services: Application, channel: RecordingChannel, workspace_dir: Path
) -> None:
    await say(small_services, channel, "1", "hello")
    reply = await say(small_services, channel, "1", "/compact the budget")
    assert reply == "Nothing to compact: the conversation has 2 messages and the last 20 are kept."
    assert "compactionCount" not in session_file(workspace_dir)["metadata"]


async def test_compact_0_summarizes_everything(small_services: Application, channel: RecordingChannel) -> None:
    await say(small_services, channel, "1", f"note {FACTS[0]}")
    reply = await say(small_services, channel, "1", "/compact 0")
    assert reply.startswith("Compacted with an LLM summary: removed 2 messages, kept 0.")
    session = await small_services.sessions.get("test:1")
    assert session is not None and len(session.messages) == 1 and FACTS[0] in session.messages[0].content


async def test_context_shows_usage_threshold_compactions_and_the_largest_parts(
    small_services: Application, channel: RecordingChannel
) -> None:
    for fact in FACTS:
        await say(small_services, channel, "1", f"For the trip: {fact}")
    await say(small_services, channel, "1", "/compact 2")

    text = await say(small_services, channel, "1", "/context")

    lines = text.splitlines()
    assert lines[0] == "Context usage"
    assert set(lines[1].split()[0]) <= {"█", "░"} and len(lines[1].split()[0]) == 30 and lines[1].endswith("%")
    assert lines[2].startswith("Tokens: ~")
    assert "of 3,200 (compaction threshold; tiny-4k: input 4,000, output 500)" in lines[2]
    assert lines[3].startswith("Conversation: ~") and "in 3 messages; compacted when over ~" in lines[3]
    assert lines[4] == "Compactions: 1 (last: manual, summary removed 4, kept 2)"
    assert lines[5] == "Largest parts (tokens / share):"
    parts = "\n".join(lines[6:])
    # Each part's real use against its share: not the share itself (memory and RAG are off here).
    assert "  persona and instructions: ~" in parts and "/ 320\n" in parts
    assert "  history: ~" in parts and "/ 1,280" in parts
    assert "  summary: ~" in parts and "/ 480" in parts
    assert "  tool schemas: ~" in parts and "MEMORY.md" not in parts and "RAG" not in parts
    assert "Reply reserve: 500 tokens" in parts
    assert "Largest messages:" in parts and "Summary: " in parts

    status = await say(small_services, channel, "1", "/status")
    assert "Compactions: 1" in status

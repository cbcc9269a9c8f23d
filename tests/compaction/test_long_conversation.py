"""A 300-turn conversation with a model of 4,000 tokens: it never overflows, and early facts survive."""

from __future__ import annotations

import json
from pathlib import Path

from bot.compaction.history_search import TOOL_NAME
from bot.domain.message import Role, ToolCall
from bot.tools.registry import ToolContext
from tests.compaction.helpers import LimitedModel, build_small, is_summary_request, say
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

FACTS = [
    "FACT-01 locker code is KX-4471",
    "FACT-02 sister name is MARGOT",
    "FACT-03 wifi password is TANGERINE-88",
    "FACT-04 dentist day is THURSDAY",
]


async def test_300_turns_on_a_small_model_never_overflow_and_keep_early_facts(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    model = LimitedModel()
    fake_openai.set_responder(model)
    services = build_small(workspace_dir, fake_openai)
    try:
        for number, fact in enumerate(FACTS):
            await say(services, channel, "1", f"Please remember this, turn {number}: {fact}.")
        for number in range(len(FACTS), 300):
            await say(services, channel, "1", f"Turn {number}: some ordinary chatter about the weather and plans.")

        # Every request, the chat ones and the summaries, fitted the model's window.
        assert model.over_limit == []
        assert model.largest_request <= 4000 - 500
        assert channel.sent["1"][-1].startswith("Noted: Turn 299")

        stored = json.loads((workspace_dir / "sessions" / "test:1.json").read_text())
        messages = stored["messages"]
        summary = messages[0]
        assert summary["role"] == "system" and summary["content"].startswith("[Conversation summary]\n")
        for fact in FACTS:  # stated in the first turns, compacted away long ago, still in the summary
            assert fact in summary["content"]
        assert stored["metadata"]["compactionCount"] >= 5
        assert stored["metadata"]["summary"] in summary["content"]
        events = stored["metadata"]["compactionEvents"]
        assert all(event["status"] == "completed" and event["method"] == "summary" for event in events)
        assert len(events) == stored["metadata"]["compactionCount"] or len(events) == 20  # keptEvents

        # The live session starts with the summary, then whole turns: a user message first.
        assert messages[1]["role"] == "user"
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * ((len(messages) - 1) // 2)
        # Every chat request the model got also had whole turns after the system prompt and summary.
        for request in fake_openai.chat_requests():
            if is_summary_request(request):
                continue
            roles = [m["role"] for m in request["messages"] if m["role"] != "system"]
            assert roles[0] == "user"

        # The archive kept all 600 messages; search_history finds the early facts in it.
        archive = (workspace_dir / "sessions" / "archive" / "test:1.jsonl").read_text().splitlines()
        assert len(archive) == 600
        config = await services.config_store.current()
        context = ToolContext("test:1", "test", "1", config)
        outcome = await services.tools.execute(
            ToolCall(id="c1", name=TOOL_NAME, arguments=json.dumps({"query": "locker code"})), context
        )
        assert not outcome.is_error
        assert "KX-4471" in outcome.content
        assert len(outcome.content) <= config.compaction.history_search_max_chars
    finally:
        await services.stop()
    assert Role.SYSTEM.value == "system"

"""The tokens spent on replies, on indexing the knowledge graph and on compaction, today and in total:
counted from what the provider reports, shown by `/status` and `/metrics`, kept over a restart."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.domain.turn import Usage as ProviderUsage
from bot.llm.spending import TokenSpending
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, Usage, echo_responder
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, lightrag_responder, queued_count, rag_of, say
from tests.waiting import wait_until

REPLY_USAGE = Usage(prompt_tokens=1000, completion_tokens=20, cached_tokens=600)
EXTRACTION_USAGE = Usage(prompt_tokens=300, completion_tokens=40)
SUMMARY_USAGE = Usage(prompt_tokens=700, completion_tokens=90)


def priced(request: dict[str, Any]) -> Reply:
    """The fake model's answers, each with the usage a provider would report for its kind of call."""
    system = json.dumps(request["messages"][0]) if request.get("messages") else ""
    if "Knowledge Graph Specialist" in system:
        return Reply(text=lightrag_responder(request).text, usage=EXTRACTION_USAGE)
    if "summar" in system.lower():
        return Reply(text="The user told about Marta and Biscuit.", usage=SUMMARY_USAGE)
    return Reply(text=echo_responder(request).text, usage=REPLY_USAGE)


async def test_status_and_metrics_show_tokens_by_purpose_and_the_totals_survive_a_restart(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, {"idleFlushSeconds": 3600})
    fake_openai.set_responder(priced)
    try:
        await say(services, channel, "1", "My sister Marta moved to Lisbon last week, she loves it there.")
        await say(services, channel, "1", "Our dog Biscuit has a vet appointment at Greenfield Clinic on Tuesday.")

        async def two_queued() -> bool:
            return await queued_count(services) == 2

        await wait_until(two_queued)
        assert await rag_of(services).flush() == 2  # one extraction call for both
        assert "Compacted" in await say(services, channel, "1", "/compact 1")

        status = await say(services, channel, "1", "/status")
        expected = "replies 2,000 in / 40 out; indexing 300 in / 40 out; compaction 700 in / 90 out"
        assert f"Tokens today: {expected}\n" in status
        assert f"Tokens in total: {expected} (as the provider reported)" in status
        assert "2 documents indexed, 0 queued; extraction model gpt-4o-mini" in status  # the chat model
        metrics = services.metrics.render().decode()
        assert 'bot_tokens_spent{direction="prompt",period="total",purpose="indexing"} 300.0' in metrics
        assert 'bot_tokens_spent{direction="cached",period="today",purpose="reply"} 1200.0' in metrics
        assert 'bot_tokens_spent{direction="completion",period="today",purpose="compaction"} 90.0' in metrics
    finally:
        await services.stop()
        await rag_of(services).close()

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        # /status itself is no model call: the figures are the ones written at the stop.
        status = await say(again, channel, "1", "/status")
        assert "Tokens in total: replies 2,000 in / 40 out; indexing 300 in / 40 out; compaction 700 in" in status
    finally:
        await again.stop()


async def test_a_call_without_reported_usage_is_estimated_and_said_so(tmp_path: Path) -> None:
    day = date(2026, 3, 1)
    spending = TokenSpending(tmp_path / "token-spending.json", lambda: day, lambda model: 4.0)
    messages = [{"role": "system", "content": "x" * 400}, {"role": "user", "content": "y" * 400}]
    spending.count_call("indexing", "some-model", None, messages, "z" * 80)
    spending.count_call("reply", "some-model", ProviderUsage(500, 25, "some-model"), messages, "")
    assert (
        spending.total.by_purpose["indexing"].prompt == 200 and spending.total.by_purpose["indexing"].completion == 20
    )
    assert "(1 of 2 calls estimated)" in spending.describe()
    await spending.close()

    day = date(2026, 3, 2)  # the next day: today starts over, the total goes on
    reread = TokenSpending(tmp_path / "token-spending.json", lambda: day, lambda model: 4.0)
    assert reread.describe().startswith("Tokens today: none\nTokens in total: replies 500 in / 25 out; indexing 200")


async def test_a_damaged_spending_file_is_logged_counts_start_from_zero_and_it_is_written_whole_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token-spending.json"
    path.write_text('{"total": {"reply": ')  # a hand edit cut short
    spending = TokenSpending(path, lambda: date(2026, 3, 1), lambda model: 4.0)
    assert "token-spending.json is not a JSON object (token spending counts from zero)" in caplog.text
    assert spending.describe() == "Tokens today: none\nTokens in total: none (as the provider reported)"
    spending.count_call("reply", "some-model", ProviderUsage(500, 25, "some-model"), [], "")
    await spending.close()
    assert json.loads(path.read_text())["total"]

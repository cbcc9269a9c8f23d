"""AutoCompactionSystem (18) in the pipeline: when it compacts, and that it never costs the user a reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import Application
from bot.context.plan import ContextPlan
from bot.domain.session import AgentSession
from bot.settings import RuntimeConfig
from tests.compaction.helpers import LimitedModel, build_small, compaction_of, is_summary_request, say
from tests.fakes.openai_server import FakeOpenAI, Reply, Usage
from tests.fakes.recording_channel import RecordingChannel


async def test_a_reported_prompt_over_the_threshold_compacts_before_the_next_call(
    small_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, limited_model: LimitedModel
) -> None:
    for number in range(6):  # ~1,300 tokens by the estimate: under the threshold
        await say(small_services, channel, "1", f"small talk {number} " + "x" * 300)
    # The provider counts far more than our estimate (say, a script the estimate undercounts).
    fake_openai.script(Reply(text="a long one", usage=Usage(prompt_tokens=3500, completion_tokens=3)))
    await say(small_services, channel, "1", "something")

    await say(small_services, channel, "1", "and now?")

    session = await small_services.sessions.get("test:1")
    assert session is not None
    [event] = session.metadata.compaction_events
    assert event["reason"] == "usage" and event["method"] == "summary"
    requests = fake_openai.chat_requests()
    assert is_summary_request(requests[-2]) and not is_summary_request(requests[-1])
    assert requests[-1]["messages"][1]["content"].startswith("[Conversation summary]")


async def test_a_turn_that_compacts_plans_before_under_the_lock_and_after_and_no_more(
    small_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for number in range(6):
        await say(small_services, channel, "1", f"small talk {number} " + "x" * 300)
    fake_openai.script(Reply(text="a long one", usage=Usage(prompt_tokens=3500, completion_tokens=3)))
    await say(small_services, channel, "1", "something")
    planner = compaction_of(small_services).planner  # the one planner of the bot: context building's too
    plans: list[ContextPlan] = []
    plan = planner.plan

    def counted(session: AgentSession, model: str, config: RuntimeConfig) -> ContextPlan:
        plans.append(plan(session, model, config))
        return plans[-1]

    monkeypatch.setattr(planner, "plan", counted)
    await say(small_services, channel, "1", "and now?")
    session = await small_services.sessions.get("test:1")
    assert session is not None and len(session.metadata.compaction_events) == 1
    # AutoCompaction's check (18), which the compaction takes as its first; the check again under the
    # session's lock (another task may have compacted meanwhile); ContextBuilding's (20) of what is left.
    assert len(plans) == 3


async def test_with_compaction_disabled_nothing_is_compacted(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    model = LimitedModel(limit_tokens=100_000)
    fake_openai.set_responder(model)
    services = build_small(workspace_dir, fake_openai, enabled=False)
    try:
        for number in range(30):
            await say(services, channel, "1", f"turn {number} " + "x" * 300)
        session = await services.sessions.get("test:1")
        assert session is not None and len(session.messages) == 60
        assert model.summary_requests == 0
    finally:
        await services.stop()


async def test_a_compaction_that_raises_does_not_cost_the_reply(
    small_services: Application, channel: RecordingChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(compaction_of(small_services), "compact_if_needed", broken)
    assert (await say(small_services, channel, "1", "hello")).startswith("Noted: hello")

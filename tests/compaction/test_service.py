"""CompactionService: when it compacts, what it keeps, and what happens when the summarizer fails."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from bot.app import Application
from bot.compaction.events import CompactionMethod, CompactionReason, CompactionStatus
from bot.domain.conversation import split_summary
from bot.domain.message import Message, Role
from bot.domain.session import AgentSession
from tests.compaction.helpers import (
    SMALL_MODEL,
    LimitedModel,
    compaction_of,
    fact_keeping_summary,
    is_summary_request,
    provider_tokens,
    small_model_workspace,
)
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply


async def long_session(services: Application, turns: int = 40, chat_id: str = "1") -> AgentSession:
    """A session of `turns` user/assistant turns (~110 tokens each) written as the pipeline writes them."""
    session = await services.sessions.get_or_create("test", chat_id)
    messages: list[Message] = []
    for number in range(turns):
        messages.append(Message.user(f"Turn {number}: FACT-{number:02d} item name is ITEM-{number} " + "u" * 150))
        messages.append(Message.assistant(f"Answer {number}: " + "a" * 200))
    await services.sessions.append_messages(session, messages)
    return session


async def test_two_concurrent_triggers_compact_once(small_services: Application, limited_model: LimitedModel) -> None:
    limited_model.summarize = lambda request: Reply(text=fact_keeping_summary(request).text, delay=0.2)
    session = await long_session(small_services)
    service = compaction_of(small_services)
    config = await small_services.config_store.current()

    first, second = await asyncio.gather(
        service.compact_if_needed(session, SMALL_MODEL, config),
        service.compact_if_needed(session, SMALL_MODEL, config),
    )

    events = [event for event in (first, second) if event is not None]
    assert len(events) == 1 and events[0].status is CompactionStatus.COMPLETED
    assert limited_model.summary_requests == events[0].summary_calls  # the second trigger asked for nothing
    assert session.metadata.compaction_count == 1


async def test_a_compaction_keeps_whole_recent_turns_and_a_summary_with_the_old_facts(
    small_services: Application, limited_model: LimitedModel, workspace_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = await long_session(small_services)
    service = compaction_of(small_services)
    config = await small_services.config_store.current()
    caplog.set_level(logging.INFO)

    event = await service.compact_if_needed(session, SMALL_MODEL, config)

    assert event is not None and event.reason is CompactionReason.ESTIMATE
    assert event.method is CompactionMethod.SUMMARY
    assert event.removed + event.kept == 80 and event.messages_after == event.kept + 1
    assert event.tokens_after < event.tokens_before
    assert event.stages == ("cut", "memory-flush-skipped", "summarize", "rewrite")
    stored = json.loads((workspace_dir / "sessions" / "test:1.json").read_text())
    summary, first_kept = stored["messages"][0], stored["messages"][1]
    assert summary["role"] == "system" and summary["content"].startswith("[Conversation summary]\n## Goal")
    assert "FACT-00 item name is ITEM-0" in summary["content"]  # the oldest fact, now only in the summary
    assert first_kept["role"] == "user"
    assert stored["metadata"]["compactionEvents"][-1]["method"] == "summary"
    assert stored["metadata"]["compactionEvents"][-1]["removed"] == event.removed
    # The archive is never rewritten: it still has all 80 messages.
    archive = (workspace_dir / "sessions" / "archive" / "test:1.jsonl").read_text().splitlines()
    assert len(archive) == 80
    assert f"[AutoCompact] Compacted with LLM summary: removed {event.removed} messages, kept {event.kept}" in (
        caplog.text
    )
    assert "[AutoCompact] Context too large" in caplog.text


async def test_the_summary_request_uses_the_summary_settings_and_fits_the_summary_model(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    session = await long_session(small_services)
    await compaction_of(small_services).compact_if_needed(
        session, SMALL_MODEL, await small_services.config_store.current()
    )
    request = next(r for r in fake_openai.chat_requests() if is_summary_request(r))
    assert request["model"] == SMALL_MODEL  # no summaryModel nor balancedModel configured
    assert request["temperature"] == 0.3
    assert request["max_tokens"] == 500  # summaryMaxTokens bounded by the model's output
    assert provider_tokens(request) <= 3200
    assert "**User:** Turn 0: FACT-00" in request["messages"][1]["content"]


async def test_a_second_compaction_updates_the_previous_summary(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    session = await long_session(small_services)
    service = compaction_of(small_services)
    config = await small_services.config_store.current()
    await service.compact_if_needed(session, SMALL_MODEL, config)
    first_summary = session.metadata.summary
    more = []
    for number in range(40, 70):
        more += [Message.user(f"Turn {number}: " + "u" * 150), Message.assistant(f"Answer {number}: " + "a" * 200)]
    await small_services.sessions.append_messages(session, more)

    await service.compact_if_needed(session, SMALL_MODEL, config)

    summaries = [r for r in fake_openai.chat_requests() if is_summary_request(r)]
    update = next(r for r in summaries if f"## Existing Summary\n\n{first_summary}\n" in r["messages"][1]["content"])
    assert update["messages"][0]["content"].startswith("You are updating a conversation summary")
    assert "FACT-00 item name is ITEM-0" in (session.metadata.summary or "")
    assert session.metadata.compaction_count == 2
    assert [m.role for m in session.messages].count(Role.SYSTEM) == 1


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(Fault.status(500, "boom"), id="error"),
        pytest.param(Fault.hang(5), id="timeout"),
        pytest.param("Sure! Here is a summary: we talked.", id="garbage"),
        pytest.param(Reply(text="## Goal\n" + "x" * 300), id="missing-sections"),
    ],
)
async def test_a_failing_summarizer_falls_back_to_truncation_with_a_visible_note(
    small_services: Application, limited_model: LimitedModel, workspace_dir: Path, failure: Fault | Reply | str
) -> None:
    small_model_workspace(workspace_dir, summaryTimeoutSeconds=0.3)
    limited_model.summarize = lambda request: failure
    session = await long_session(small_services)
    config = await small_services.config_store.current()

    event = await compaction_of(small_services).compact_if_needed(session, SMALL_MODEL, config)

    assert event is not None and event.status is CompactionStatus.COMPLETED
    assert event.method is CompactionMethod.TRUNCATION
    assert event.stages == ("cut", "memory-flush-skipped", "summarize-failed", "truncate", "rewrite")
    summary = session.messages[0]
    assert summary.role is Role.SYSTEM and summary.content.startswith("[Conversation summary]\n(Note: ")
    assert f"{event.removed} earlier messages were removed without a summary" in summary.content
    assert "search_history" in summary.content
    assert session.messages[1].role is Role.USER
    archive = (workspace_dir / "sessions" / "archive" / "test:1.jsonl").read_text().splitlines()
    assert len(archive) == 80


async def test_truncation_keeps_the_previous_summary(small_services: Application, limited_model: LimitedModel) -> None:
    session = await long_session(small_services)
    service = compaction_of(small_services)
    config = await small_services.config_store.current()
    await service.compact_if_needed(session, SMALL_MODEL, config)
    limited_model.summarize = lambda request: Fault.status(500)
    more = []
    for number in range(40, 70):
        more += [Message.user(f"Turn {number}: " + "u" * 150), Message.assistant(f"Answer {number}: " + "a" * 200)]
    await small_services.sessions.append_messages(session, more)

    event = await service.compact_if_needed(session, SMALL_MODEL, config)

    assert event is not None and event.method is CompactionMethod.TRUNCATION
    assert "FACT-00 item name is ITEM-0" in session.messages[0].content
    assert "removed without a summary" in session.messages[0].content


class RecordingSink:
    """Stands in for structured memory: records what it was handed, and what the session held then."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self.calls: list[tuple[str, list[Message]]] = []
        self.still_live: list[bool] = []

    async def remember_before_compaction(self, session_id: str, messages: list[Message]) -> bool:
        self.calls.append((session_id, messages))
        live_ids = {m.id for m in self.session.messages}
        self.still_live.append(all(m.id in live_ids for m in messages))
        return True


async def test_memory_gets_the_compacted_messages_before_they_leave_the_session(small_services: Application) -> None:
    session = await long_session(small_services)
    service = compaction_of(small_services)
    sink = RecordingSink(session)
    service.set_pre_compaction_sink(sink)
    before = list(session.messages)

    event = await service.compact_if_needed(session, SMALL_MODEL, await small_services.config_store.current())

    assert event is not None and "memory-flush" in event.stages
    [(session_id, flushed)] = sink.calls
    assert session_id == "test:1"
    assert flushed == before[: event.removed]
    assert sink.still_live == [True]
    assert flushed[0].content.startswith("Turn 0: FACT-00")


async def test_a_failing_memory_flush_does_not_stop_the_compaction(small_services: Application) -> None:
    class BrokenSink:
        async def remember_before_compaction(self, session_id: str, messages: list[Message]) -> bool:
            raise OSError("disk full")

    session = await long_session(small_services)
    service = compaction_of(small_services)
    service.set_pre_compaction_sink(BrokenSink())
    event = await service.compact_if_needed(session, SMALL_MODEL, await small_services.config_store.current())
    assert event is not None and event.status is CompactionStatus.COMPLETED
    assert "memory-flush-failed" in event.stages


async def test_reported_usage_over_the_threshold_triggers_once(small_services: Application) -> None:
    session = await long_session(small_services, turns=8)  # small by the estimate
    service = compaction_of(small_services)
    config = await small_services.config_store.current()
    assert await service.compact_if_needed(session, SMALL_MODEL, config) is None

    session.metadata.last_usage = {"promptTokens": 3300, "completionTokens": 10, "model": SMALL_MODEL}
    event = await service.compact_if_needed(session, SMALL_MODEL, config)
    assert event is not None and event.reason is CompactionReason.USAGE
    # The same report does not trigger again; the next call's report will be checked afresh.
    assert await service.compact_if_needed(session, SMALL_MODEL, config) is None


async def test_nothing_to_compact_does_nothing(small_services: Application) -> None:
    session = await small_services.sessions.get_or_create("test", "1")
    await small_services.sessions.append_messages(session, [Message.user("x" * 12000)])  # one huge turn
    service = compaction_of(small_services)
    assert await service.compact_if_needed(session, SMALL_MODEL, await small_services.config_store.current()) is None
    assert [m.content[:1] for m in session.messages] == ["x"]
    assert session.metadata.compaction_count == 0


async def test_old_messages_larger_than_the_summary_models_window_are_summarized_in_chunks(
    small_services: Application, limited_model: LimitedModel, fake_openai: FakeOpenAI
) -> None:
    session = await long_session(small_services, turns=120)  # ~13,000 tokens, the window is 4,000
    config = await small_services.config_store.current()

    event = await compaction_of(small_services).compact(session, SMALL_MODEL, config, keep_messages=4)

    assert event is not None and event.method is CompactionMethod.SUMMARY
    assert event.summary_calls >= 4 and limited_model.summary_requests == event.summary_calls
    assert limited_model.over_limit == []
    summaries = [r for r in fake_openai.chat_requests() if is_summary_request(r)]
    assert summaries[0]["messages"][0]["content"].startswith("You are a conversation summarizer")
    assert all(r["messages"][0]["content"].startswith("You are updating") for r in summaries[1:])
    # Facts from the first and from a late chunk are both in the final summary (the fake keeps all it sees).
    assert "FACT-00 item name is ITEM-0" in session.messages[0].content
    assert "FACT-100 item name is ITEM-100" in session.messages[0].content


async def test_recovery_compacts_harder_each_attempt_and_says_when_it_cannot(small_services: Application) -> None:
    session = await long_session(small_services, turns=30)
    service = compaction_of(small_services)
    estimate = service.planner.estimator.messages

    before = estimate(session.messages, SMALL_MODEL)
    assert await service.shrink_for_retry(session, SMALL_MODEL, attempt=1)
    after_first = estimate(session.messages, SMALL_MODEL)
    assert after_first < before
    kept_first = len(split_summary(session.messages)[1])

    assert await service.shrink_for_retry(session, SMALL_MODEL, attempt=2)
    assert estimate(session.messages, SMALL_MODEL) < after_first
    assert len(split_summary(session.messages)[1]) <= kept_first
    assert session.messages[1].role is Role.USER
    events = session.metadata.compaction_events
    assert {event["reason"] for event in events} == {"recovery"}

    # Down to the newest turn and a short summary: another attempt cannot shrink anything.
    while await service.shrink_for_retry(session, SMALL_MODEL, attempt=2):
        pass
    assert not await service.shrink_for_retry(session, SMALL_MODEL, attempt=2)
    assert split_summary(session.messages)[1][-1].content.startswith("Answer 29")


async def test_a_compaction_that_cannot_write_is_a_failed_event_and_changes_nothing(
    small_services: Application, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    session = await long_session(small_services)
    before = list(session.messages)

    async def disk_full(*args: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(small_services.sessions, "replace_messages", disk_full)
    event = await compaction_of(small_services).compact_if_needed(
        session, SMALL_MODEL, await small_services.config_store.current()
    )

    assert event is not None and event.status is CompactionStatus.FAILED
    assert event.error == "OSError: No space left on device"
    assert event.stages == ("cut", "memory-flush-skipped", "summarize", "rewrite")
    assert session.messages == before
    assert session.metadata.compaction_events[-1]["status"] == "failed"
    assert session.metadata.compaction_count == 0 and session.metadata.summary is None
    assert "[AutoCompact] Compaction of test:1 failed" in caplog.text

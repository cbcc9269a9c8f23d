"""`CompactionService`: keeps a session's live conversation inside the model's context.

A compaction cuts the conversation at a turn boundary (`cut_point`), hands the old part to the
pre-compaction sink (structured memory) so durable facts are kept, asks the summarizer for a
checkpoint summary merged with the previous one, and rewrites the live session once as
`[summary message] + recent messages`. The archive (`sessions/archive/{id}.jsonl`) is never touched:
it already holds every message, and `search_history` finds what was compacted away. When the
summarizer fails, times out or returns garbage, the old part is dropped with a visible note instead
(plain truncation); nothing is lost from the archive either way.

Callers that change a session hold `SessionService.lock_for` (the pipeline does for a whole run); this
service adds its own per-session lock with a double check, so two triggers at once compact once.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import re
import time
from typing import Protocol

from bot.compaction.cut_point import Snap, find_cut_point
from bot.compaction.events import (
    CompactionEvent,
    CompactionMethod,
    CompactionReason,
    CompactionStatus,
    keep_event,
    log_event,
)
from bot.compaction.summarizer import Summarizer, SummaryFailed, cap_summary, strip_header
from bot.context.plan import ContextPlan
from bot.context.planner import ContextPlanner
from bot.domain.conversation import SUMMARY_HEADER, split_summary
from bot.domain.message import Message
from bot.domain.model import utc_now
from bot.domain.session import AgentSession
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

TRUNCATION_NOTE_PREFIX = "(Note:"
_TRUNCATION_NOTE = re.compile(r"^\(Note: \d+ earlier messages were removed without a summary.*$", re.MULTILINE)


class PreCompactionSink(Protocol):
    """Where the messages about to be compacted go first, so their durable facts, decisions and
    procedures land in structured memory (the pre-compaction flush). Awaited before the
    messages leave the live session; a failure is logged and the compaction goes on (the archive
    still has every message)."""

    async def remember_before_compaction(self, session_id: str, messages: list[Message]) -> bool:
        """False when memory is switched off and nothing was recorded."""
        ...


def current_summary(session: AgentSession) -> str | None:
    prefix, _ = split_summary(session.messages)
    return strip_header(prefix[0].content) if prefix else None


class CompactionService:
    """Decides when a session is too large for its model, and compacts it."""

    def __init__(
        self,
        sessions: SessionService,
        summarizer: Summarizer,
        planner: ContextPlanner,
        config_store: RuntimeConfigStore,
        sink: PreCompactionSink | None = None,
    ) -> None:
        self._sessions = sessions
        self._summarizer = summarizer
        self._planner = planner
        self._estimator = planner.estimator
        self._config_store = config_store
        self._sink = sink
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def planner(self) -> ContextPlanner:
        return self._planner

    def set_pre_compaction_sink(self, sink: PreCompactionSink | None) -> None:
        """Connect structured memory: it gets the messages of every compaction before they go."""
        self._sink = sink

    def summary_model(self, config: RuntimeConfig, chat_model: str) -> str:
        return config.compaction.summary_model or config.llm.balanced_model or chat_model

    def trigger_reason(self, session: AgentSession, plan: ContextPlan) -> CompactionReason | None:
        """Why the session must be compacted before the next call, or None.

        Either the estimate does not fit, or the provider reported the last prompt over the threshold (its
        count is the truth where the estimate is off) and no compaction has happened since that report.
        """
        if plan.over:
            return CompactionReason.ESTIMATE
        usage = session.metadata.last_usage
        if (
            usage is not None
            and usage != session.metadata.usage_at_last_compaction
            and usage.get("promptTokens", 0) > plan.budget.trigger_tokens
        ):
            return CompactionReason.USAGE
        return None

    async def compact_if_needed(
        self, session: AgentSession, model: str, config: RuntimeConfig, plan: ContextPlan | None = None
    ) -> CompactionEvent | None:
        """Compact when the session does not fit (automatic compaction, before the model call).

        `plan`: the session's plan as the caller just made it (it is not made again for the first
        check). Returns the final event, or None when nothing was needed or nothing could be cut. Safe
        to call from several tasks at once: the second one finds the work done and returns None.
        """
        if not config.compaction.enabled:
            return None
        checked = plan if plan is not None else self._planner.plan(session, model, config)
        if self.trigger_reason(session, checked) is None:
            return None
        async with self._lock_for(session.id):
            plan = self._planner.plan(session, model, config)
            reason = self.trigger_reason(session, plan)
            if reason is None:
                log.debug("[AutoCompact] %s was compacted meanwhile; nothing to do", session.id)
                return None
            return await self._compact_locked(
                session,
                model,
                config,
                reason,
                keep_tokens=plan.keep_recent_tokens,
                keep_messages=config.compaction.keep_last_messages,
                snap="fewer",
                keep_last_turn=True,
                summary_cap_tokens=plan.summary_cap_tokens,
            )

    async def fit_to_window(self, session: AgentSession, model: str) -> CompactionEvent | None:
        """After the model's window was learned smaller: compact the conversation when it no longer fits
        the plan for that window (the caller holds the session's lock, as for `shrink_for_retry`)."""
        return await self.compact_if_needed(session, model, await self._config_store.current())

    async def compact(
        self,
        session: AgentSession,
        model: str,
        config: RuntimeConfig,
        *,
        keep_messages: int,
        focus: str | None = None,
    ) -> CompactionEvent | None:
        """`/compact`: summarize all but (at least) the last `keep_messages` messages, whole turns kept.

        Returns None when there is nothing before the kept part.
        """
        async with self._lock_for(session.id):
            budget = self._planner.budget(model, config)
            return await self._compact_locked(
                session,
                model,
                config,
                CompactionReason.MANUAL,
                keep_tokens=None,
                keep_messages=keep_messages,
                snap="more",
                keep_last_turn=False,
                summary_cap_tokens=budget.summary_cap_tokens,
                focus=focus,
            )

    async def shrink_for_retry(self, session: AgentSession, model: str, attempt: int) -> bool:
        """Payload-too-large recovery: compact harder before the caller retries the model call.

        Contract: call it after the provider refused a request as too large (`LlmFailure.CONTEXT_LENGTH`,
        HTTP 413), with `attempt` = 1 for the first retry, 2 for the second (`compaction.recoveryAttempts`
        says how many to make). The caller holds the session's lock (the pipeline run does). Each attempt
        keeps half as much as the previous one: the recent part and the summary cap of a normal
        compaction are divided by 2**attempt, at least the newest turn is kept, and when there is
        nothing left to cut the summary itself is cut shorter. Returns True only when the live messages
        got smaller; the caller then rebuilds its payload from `session.messages` and retries. False
        means retrying is pointless: reply with a clear message; the user's message is already in the
        session and the archive. Messages of the current turn that the caller has not yet appended to
        the session are not touched.
        """
        config = await self._config_store.current()
        factor = 2 ** max(1, attempt)
        async with self._lock_for(session.id):
            before = self._estimator.messages(session.messages, model)
            plan = self._planner.plan(session, model, config)
            cap_tokens = max(1, plan.summary_cap_tokens // factor)
            event = await self._compact_locked(
                session,
                model,
                config,
                CompactionReason.RECOVERY,
                keep_tokens=max(1, plan.keep_recent_tokens // factor),
                keep_messages=max(1, config.compaction.keep_last_messages // factor),
                snap="fewer",
                keep_last_turn=True,
                summary_cap_tokens=cap_tokens,
            )
            if event is None or event.status is CompactionStatus.FAILED:
                await self._cut_summary(session, model, config, cap_tokens)
            after = self._estimator.messages(session.messages, model)
        shrank = after < before
        log.info(
            "[AutoCompact] Recovery attempt %d for %s: ~%d -> ~%d tokens (%s)",
            attempt, session.id, before, after, "retrying" if shrank else "could not shrink",
        )  # fmt: skip
        return shrank

    def _lock_for(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    async def _compact_locked(
        self,
        session: AgentSession,
        model: str,
        config: RuntimeConfig,
        reason: CompactionReason,
        *,
        keep_tokens: int | None,
        keep_messages: int | None,
        snap: Snap,
        keep_last_turn: bool,
        summary_cap_tokens: int,
        focus: str | None = None,
    ) -> CompactionEvent | None:
        prefix, body = split_summary(session.messages)
        cut = find_cut_point(
            body,
            self._estimator,
            keep_tokens=keep_tokens,
            keep_messages=keep_messages,
            snap=snap,
            keep_last_turn=keep_last_turn,
            model=model,
        )
        if cut == 0:
            log.info("[AutoCompact] Nothing to compact in %s (%d messages, %s)", session.id, len(body), reason.value)
            return None
        old, recent = body[:cut], body[cut:]
        previous = strip_header(prefix[0].content) if prefix else None
        started = time.monotonic()
        event = CompactionEvent(
            session_id=session.id,
            status=CompactionStatus.STARTED,
            reason=reason,
            started_at=utc_now(),
            model=model,
            tokens_before=self._estimator.messages(session.messages, model),
            messages_before=len(session.messages),
            removed=len(old),
            kept=len(recent),
        )
        log_event(event)
        stages = ["cut"]
        # Restored when the compaction fails half-way, so a failure leaves the session as it was.
        messages_before, metadata_before = list(session.messages), copy.deepcopy(session.metadata)
        try:
            stages.append(await self._flush_to_memory(session.id, old))
            summary_model = self.summary_model(config, model)
            plan = self._summarizer.plan(summary_model, config.compaction, summary_cap_tokens, focus)
            calls = 0
            try:
                text, calls = await self._summarizer.summarize(old, previous, plan, config.compaction)
                method = CompactionMethod.SUMMARY
                stages.append("summarize")
            except SummaryFailed as failure:
                log.warning(
                    "[AutoCompact] Summarizer failed for %s: %s; falling back to truncation", session.id, failure
                )
                text = self._truncation_summary(session, previous, len(old), str(failure))
                method = CompactionMethod.TRUNCATION
                stages += ["summarize-failed", "truncate"]
            compacted = [Message.system(f"{SUMMARY_HEADER}\n{text}"), *recent]
            stages.append("rewrite")
            final = event.finished(
                CompactionStatus.COMPLETED,
                tokens_after=self._estimator.messages(compacted, model),
                messages_after=len(compacted),
                duration_ms=(time.monotonic() - started) * 1000,
                stages=tuple(stages),
                method=method,
                summary_calls=calls,
            )
            self._record(session, final, text, config)
            await self._sessions.replace_messages(session, compacted)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            session.messages = messages_before
            session.metadata = metadata_before
            failed = event.finished(
                CompactionStatus.FAILED,
                duration_ms=(time.monotonic() - started) * 1000,
                stages=tuple(stages),
                error=f"{type(error).__name__}: {error}",
            )
            log.exception("[AutoCompact] Compaction of %s raised", session.id)
            log_event(failed)
            keep_event(session.metadata, failed, config.compaction.kept_events)
            return failed
        log_event(final)
        return final

    async def _flush_to_memory(self, session_id: str, old: list[Message]) -> str:
        if self._sink is None:
            return "memory-flush-skipped"
        try:
            flushed = await self._sink.remember_before_compaction(session_id, list(old))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("[AutoCompact] Memory flush before compacting %s failed: %s", session_id, error)
            return "memory-flush-failed"
        return "memory-flush" if flushed else "memory-flush-skipped"

    def _truncation_summary(self, session: AgentSession, previous: str | None, removed: int, reason: str) -> str:
        """The previous summary (if any) with one visible note counting what was dropped unsummarized."""
        dropped = session.metadata.messages_dropped_without_summary + removed
        session.metadata.messages_dropped_without_summary = dropped
        kept = _TRUNCATION_NOTE.sub("", previous or "").strip()
        note = (
            f"{TRUNCATION_NOTE_PREFIX} {dropped} earlier messages were removed without a summary "
            f"(the summarizer failed: {reason}). They are kept in the archive; search_history finds them.)"
        )
        return f"{kept}\n\n{note}" if kept else note

    def _record(self, session: AgentSession, event: CompactionEvent, summary: str, config: RuntimeConfig) -> None:
        metadata = session.metadata
        metadata.summary = summary
        metadata.compaction_count += 1
        if metadata.last_usage is not None:
            metadata.usage_at_last_compaction = metadata.last_usage
        keep_event(metadata, event, config.compaction.kept_events)

    async def _cut_summary(self, session: AgentSession, model: str, config: RuntimeConfig, cap_tokens: int) -> None:
        """Recovery's last resort: cut the summary message itself to `cap_tokens`."""
        prefix, body = split_summary(session.messages)
        if not prefix or self._estimator.messages(prefix, model) <= cap_tokens:
            return
        started = time.monotonic()
        summary = strip_header(prefix[0].content)
        cap_chars = max(config.compaction.summary_min_chars, math.floor(cap_tokens * self._estimator.ratio_for(model)))
        shorter = cap_summary(summary, cap_chars)
        if len(shorter) >= len(summary):
            return
        compacted = [Message.system(f"{SUMMARY_HEADER}\n{shorter}"), *body]
        event = CompactionEvent(
            session_id=session.id,
            status=CompactionStatus.COMPLETED,
            reason=CompactionReason.RECOVERY,
            started_at=utc_now(),
            model=model,
            tokens_before=self._estimator.messages(session.messages, model),
            tokens_after=self._estimator.messages(compacted, model),
            messages_before=len(session.messages),
            messages_after=len(compacted),
            kept=len(body),
            duration_ms=(time.monotonic() - started) * 1000,
            stages=("cut-summary", "rewrite"),
            method=CompactionMethod.SUMMARY_CUT,
        )
        self._record(session, event, shorter, config)
        await self._sessions.replace_messages(session, compacted)
        log_event(event)

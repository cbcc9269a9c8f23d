"""`CompactionEvent`: one compaction's lifecycle (started, completed, failed), logged and kept.

Every compaction logs its `started` and final event with the `[AutoCompact]` prefix; the final one
(`completed` or `failed`) is also kept in the session's metadata (`compactionEvents`, newest last),
so `/context` and a reader of the session file can see what each compaction did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from bot.domain.session_metadata import CompactionEventRecord, SessionMetadata

log = logging.getLogger(__name__)


class CompactionStatus(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"


class CompactionReason(StrEnum):
    """What asked for the compaction."""

    ESTIMATE = "estimate"  # the estimated prompt exceeded the threshold before the model call
    USAGE = "usage"  # the provider reported the last prompt over the threshold
    MANUAL = "manual"  # /compact
    RECOVERY = "recovery"  # the provider refused the payload as too large


class CompactionMethod(StrEnum):
    SUMMARY = "summary"  # an LLM checkpoint summary replaced the old messages
    TRUNCATION = "truncation"  # the summarizer failed: the old messages were dropped, with a visible note
    SUMMARY_CUT = "summary-cut"  # recovery: only the summary was cut shorter


@dataclass(frozen=True)
class CompactionEvent:
    """What one compaction did: sizes before and after, how long it took, the stages it ran."""

    session_id: str
    status: CompactionStatus
    reason: CompactionReason
    started_at: datetime
    model: str
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    removed: int = 0
    kept: int = 0
    duration_ms: float = 0.0
    stages: tuple[str, ...] = field(default_factory=tuple)
    method: CompactionMethod | None = None
    summary_calls: int = 0
    error: str | None = None

    def finished(self, status: CompactionStatus, **changes: Any) -> CompactionEvent:
        return replace(self, status=status, **changes)

    def to_json_dict(self) -> CompactionEventRecord:
        data: CompactionEventRecord = {
            "status": self.status.value,
            "reason": self.reason.value,
            "startedAt": self.started_at.isoformat(),
            "model": self.model,
            "tokensBefore": self.tokens_before,
            "tokensAfter": self.tokens_after,
            "messagesBefore": self.messages_before,
            "messagesAfter": self.messages_after,
            "removed": self.removed,
            "kept": self.kept,
            "durationMs": round(self.duration_ms, 1),
            "stages": list(self.stages),
            "summaryCalls": self.summary_calls,
        }
        if self.method is not None:
            data["method"] = self.method.value
        if self.error is not None:
            data["error"] = self.error
        return data


_STARTED_WORDING = {
    CompactionReason.ESTIMATE: "Context too large",
    CompactionReason.USAGE: "Last prompt reported over the threshold",
    CompactionReason.MANUAL: "Compaction requested (/compact)",
    CompactionReason.RECOVERY: "The model refused the payload as too large",
}


def log_event(event: CompactionEvent) -> None:
    """One `[AutoCompact]` line per lifecycle step, in the wording the docs show (docs/memory.md, "Log lines")."""
    if event.status is CompactionStatus.STARTED:
        why = _STARTED_WORDING[event.reason]
        log.info(
            "[AutoCompact] %s: ~%d tokens, %d messages in %s. Compacting...",
            why, event.tokens_before, event.messages_before, event.session_id,
        )  # fmt: skip
        return
    if event.status is CompactionStatus.FAILED:
        log.warning(
            "[AutoCompact] Compaction of %s failed after %.0f ms (stages %s): %s",
            event.session_id, event.duration_ms, ", ".join(event.stages), event.error,
        )  # fmt: skip
        return
    how = {
        CompactionMethod.SUMMARY: "with LLM summary",
        CompactionMethod.TRUNCATION: "by truncation",
        CompactionMethod.SUMMARY_CUT: "by cutting the summary",
    }[event.method or CompactionMethod.SUMMARY]
    log.info(
        "[AutoCompact] Compacted %s: removed %d messages, kept %d (~%d -> ~%d tokens, %.0f ms, %s, stages %s)",
        how, event.removed, event.kept, event.tokens_before, event.tokens_after, event.duration_ms,
        event.session_id, ", ".join(event.stages),
    )  # fmt: skip


def keep_event(metadata: SessionMetadata, event: CompactionEvent, kept: int) -> None:
    """Append the final event to the session's metadata, keeping the newest `kept`."""
    metadata.compaction_events = (*metadata.compaction_events, event.to_json_dict())[-kept:] if kept > 0 else ()

"""Payload-too-large recovery (seed 004): when the provider refuses a request as too large, compact
harder and retry, at most `compaction.recoveryAttempts` times, and only while compacting shrank it.

`with_payload_recovery` wraps one model call for the tool loop: the call is a closure that builds its
payload from `session.messages` each time, so a retry sends the compacted conversation. When recovery
cannot help, the provider's `LlmError` goes up unchanged: the runner replies with its clear sentence
("The conversation is too long for the model. Your message is saved; …") and the user's message,
written before any system ran, stays in the session and the archive.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.compaction.service import CompactionService
from bot.domain.session import AgentSession
from bot.llm.errors import LlmError, LlmFailure

log = logging.getLogger(__name__)

T = TypeVar("T")

PAYLOAD_TOO_LARGE_STATUS = "Error code: 413"


def is_payload_too_large(error: LlmError) -> bool:
    """Whether the provider refused the request for its size (context length, or HTTP 413)."""
    return error.failure is LlmFailure.CONTEXT_LENGTH or (
        error.failure is LlmFailure.BAD_REQUEST and error.detail.startswith(PAYLOAD_TOO_LARGE_STATUS)
    )


async def with_payload_recovery(
    compaction: CompactionService,
    session: AgentSession,
    model: str,
    attempts: int,
    call: Callable[[], Awaitable[T]],
) -> T:
    """`await call()`, compacting harder and calling again after a payload-too-large refusal.

    The caller holds the session's lock. At most `attempts` retries; a retry happens only when
    `CompactionService.shrink_for_retry` made the live conversation smaller.
    """
    attempt = 0
    while True:
        try:
            return await call()
        except LlmError as error:
            if not is_payload_too_large(error) or attempt >= attempts:
                raise
            attempt += 1
            log.warning("[AutoCompact] %s refused the payload of %s as too large; compacting harder", model, session.id)
            if not await compaction.shrink_for_retry(session, model, attempt):
                log.warning("[AutoCompact] Nothing left to compact in %s; giving up on this message", session.id)
                raise

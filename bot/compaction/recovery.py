"""Payload-too-large recovery: when the provider refuses a request as too large, plan for the window it
states, or compact harder, and retry, at most `compaction.recoveryAttempts` times, and only while
something got smaller.

`with_payload_recovery` wraps one model call for the tool loop: the call is a closure that builds its
payload from `session.messages` and the turn's prompt parts each time, so a retry sends what recovery
made smaller. A refusal that states the model's window teaches it (`ContextPlanner.learn_refusal`): the
conversation is compacted to fit the plan for that window and `refit` builds every other prompt part
(memory, Relevant Memory, instructions, skills) again within its share of it, so the retry fits and the
next messages are planned for it from the start. A refusal that states none compacts the history
harder; when the history cannot shrink, the other parts do: the window is taken as a quarter smaller
than the refused request, and `refit` builds them again for it. When recovery cannot help, the provider's
`LlmError` goes up unchanged: the runner replies with its clear sentence ("The conversation is too long
for the model. Your message is saved; …") and the user's message, written before any system ran, stays
in the session and the archive.
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
# When neither the refusal nor the history gives room: the window is taken as this share of the refused request.
SQUEEZE_SHARE = 0.75
# A request smaller than this refused as too large says nothing about the window (a 413 for the bytes of an image).
MIN_SQUEEZE_TOKENS = 1000
# A stated window is learned when the refused request came to at least this share of it by our estimate: a
# refusal of a much smaller prompt is about something else (a reply reserve asked for, a misconfigured server).
PLAUSIBLE_SHARE = 0.5
# Builds the turn's prompt parts again for the plan as it stands (after a window was learned).
Refit = Callable[[], Awaitable[None]]


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
    refit: Refit | None = None,
    sent_tokens: Callable[[], int] | None = None,
) -> T:
    """`await call()`, making the request smaller and calling again after a payload-too-large refusal.

    The caller holds the session's lock. At most `attempts` retries; a retry happens only when the plan
    was made for a smaller window or the live conversation got smaller. `sent_tokens`: the estimate of the
    request the last call sent (a window is learned only from the refusal of a request of its size).
    """
    attempt = 0
    while True:
        try:
            return await call()
        except LlmError as error:
            if not is_payload_too_large(error) or attempt >= attempts:
                raise
            attempt += 1
            planner = compaction.planner
            sent = sent_tokens() if sent_tokens is not None else None
            stated = error.window_tokens
            if stated is not None and sent is not None and sent < stated * PLAUSIBLE_SHARE:
                log.warning(
                    "[AutoCompact] %s refused a request of ~%d tokens stating a window of %d: not learned",
                    model, sent, stated,
                )  # fmt: skip
                stated = None
            if planner.learn_refusal(model, stated):
                await compaction.fit_to_window(session, model)
                if refit is not None:
                    await refit()
                continue
            log.warning("[AutoCompact] %s refused the payload of %s as too large; compacting harder", model, session.id)
            if await compaction.shrink_for_retry(session, model, attempt):
                continue
            # Only after a refusal that states no window: one whose stated window was not believed is not either.
            squeezed = int(sent * SQUEEZE_SHARE) if sent is not None and sent >= MIN_SQUEEZE_TOKENS else None
            if refit is not None and error.window_tokens is None and planner.learn_refusal(model, squeezed):
                log.warning("[AutoCompact] Nothing left to compact in %s; every other part made smaller", session.id)
                await refit()
                continue
            log.warning("[AutoCompact] Nothing left to compact in %s; giving up on this message", session.id)
            raise

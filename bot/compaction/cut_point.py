"""Where to cut a conversation into an old part (summarized) and a recent part (kept verbatim).

A cut is only ever made just before a user message: a turn (the user's message, the assistant's
tool calls with their results, and the answer) is never split, so a user message is never separated
from its answer nor a tool call from its result.
"""

from __future__ import annotations

from typing import Literal

from bot.context.estimator import TokenEstimator
from bot.domain.message import Message, Role

Snap = Literal["fewer", "more"]


def turn_starts(messages: list[Message]) -> list[int]:
    """Indices where a turn begins: every user message."""
    return [index for index, message in enumerate(messages) if message.role is Role.USER]


def find_cut_point(
    messages: list[Message],
    estimator: TokenEstimator,
    *,
    keep_tokens: int | None = None,
    keep_messages: int | None = None,
    snap: Snap = "fewer",
    keep_last_turn: bool = True,
    model: str | None = None,
) -> int:
    """Index of the first message to keep; 0 means there is nothing to compact.

    Walks back from the newest message while the kept part stays within `keep_tokens` and
    `keep_messages` (None: no limit), then snaps to a turn boundary: `fewer` moves the cut forward
    (keeps less, stays within the limits: automatic compaction), `more` moves it back (keeps at least
    what was asked: `/compact N`). With `keep_last_turn` the newest turn always stays, whatever it costs.
    """
    total = len(messages)
    cut = total
    kept_tokens = 0
    while cut > 0:
        candidate = estimator.message(messages[cut - 1], model)
        if keep_tokens is not None and kept_tokens + candidate > keep_tokens:
            break
        if keep_messages is not None and total - (cut - 1) > keep_messages:
            break
        kept_tokens += candidate
        cut -= 1
    if cut == 0:
        return 0
    boundaries = [*turn_starts(messages), total]
    if keep_last_turn:
        starts = turn_starts(messages)
        if starts:
            boundaries = [boundary for boundary in boundaries if boundary <= starts[-1]]
    if snap == "fewer":
        later = [boundary for boundary in boundaries if boundary >= cut]
        chosen = later[0] if later else max(boundaries)
    else:
        earlier = [boundary for boundary in boundaries if boundary <= cut]
        chosen = earlier[-1] if earlier else 0
    return max(chosen, 0)

"""`ContextPlan`: a session's prompt size against the budget, part by part."""

from __future__ import annotations

from dataclasses import dataclass

from bot.context.budget import MEMORY, RAG, SYSTEM, TOOLS, ContextBudget


@dataclass(frozen=True)
class ContextPlan:
    """A session's prompt size against the budget, part by part (what `/context` shows)."""

    budget: ContextBudget
    summary_tokens: int
    recent_tokens: int
    reserve: dict[str, int]
    messages: int

    @property
    def message_tokens(self) -> int:
        return self.summary_tokens + self.recent_tokens

    @property
    def total_tokens(self) -> int:
        return self.message_tokens + sum(self.reserve.values())

    @property
    def room_for_messages(self) -> int:
        return self.budget.room_for_messages(self.reserve)

    @property
    def over(self) -> bool:
        return self.message_tokens > self.room_for_messages

    @property
    def keep_recent_tokens(self) -> int:
        """The verbatim recent part a compaction keeps: within its share's `keepRecentRatio`, and
        with the summary within `keepRecentRatio` of the room, so the conversation has room to grow
        and the next compaction is many turns away even when the other parts leave little room."""
        return max(1, min(self.budget.keep_recent_tokens, self._half_of_kept_room))

    @property
    def summary_cap_tokens(self) -> int:
        return max(1, min(self.budget.summary_cap_tokens, self._half_of_kept_room))

    @property
    def _half_of_kept_room(self) -> int:
        return int(self.room_for_messages * self.budget.keep_recent_ratio / 2)


def reserve_description(reserve: dict[str, int]) -> list[tuple[str, int]]:
    """The reserved parts in `/context`'s order with human names."""
    names = {SYSTEM: "system prompt", MEMORY: "memory", RAG: "relevant memory (RAG)", TOOLS: "tool schemas"}
    return [(names[key], tokens) for key, tokens in reserve.items() if key in names]

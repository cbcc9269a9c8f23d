"""`ContextPlan`: one turn's prompt against the budget, part by part: what each part is given and uses.

Each part of the request draws on one share of the compaction threshold (`ContextBudget`): the persona
and instructions on `system`; MEMORY.md, the memory pack and the daily notes together on `memory`;
`# Relevant Memory` on `rag`; the tool schemas on `tools`; the summary on `summary`; the history on
`recent`. What a part uses is what it really takes in the request (after any cut to its share), never
its share: a two-message chat uses a few hundred tokens whatever the shares say.

The plan is made by `ContextPlanner`: before the prompt is built, from the conversation and the tool
schemas (compaction's trigger), then completed by context building (20) with what the prompt parts
took; `/status` and `/context` show that plan, so they agree with each other and with the request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bot.context.budget import MEMORY, RAG, RECENT, SUMMARY, SYSTEM, TOOLS, ContextBudget


class PromptPart(StrEnum):
    """A part of the request; the value names it in session metadata, `label` in `/context`."""

    INSTRUCTIONS = "instructions"
    LONG_TERM = "longTermMemory"
    MEMORY_PACK = "memoryPack"
    DAILY_NOTES = "dailyNotes"
    RELEVANT_MEMORY = "relevantMemory"
    SUMMARY = "summary"
    HISTORY = "history"
    TOOL_SCHEMAS = "toolSchemas"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def share(self) -> str:
        """The budget share (`BudgetShares` field) this part draws on."""
        return _SHARES[self]


_LABELS = {
    PromptPart.INSTRUCTIONS: "persona and instructions",
    PromptPart.LONG_TERM: "MEMORY.md",
    PromptPart.MEMORY_PACK: "memory pack",
    PromptPart.DAILY_NOTES: "daily notes",
    PromptPart.RELEVANT_MEMORY: "relevant memory (RAG)",
    PromptPart.SUMMARY: "summary",
    PromptPart.HISTORY: "history",
    PromptPart.TOOL_SCHEMAS: "tool schemas",
}
_SHARES = {
    PromptPart.INSTRUCTIONS: SYSTEM,
    PromptPart.LONG_TERM: MEMORY,
    PromptPart.MEMORY_PACK: MEMORY,
    PromptPart.DAILY_NOTES: MEMORY,
    PromptPart.RELEVANT_MEMORY: RAG,
    PromptPart.SUMMARY: SUMMARY,
    PromptPart.HISTORY: RECENT,
    PromptPart.TOOL_SCHEMAS: TOOLS,
}
# The parts context building (20) makes, after compaction's decision (18): sized only once built.
BUILT_PARTS = (
    PromptPart.INSTRUCTIONS,
    PromptPart.LONG_TERM,
    PromptPart.MEMORY_PACK,
    PromptPart.DAILY_NOTES,
    PromptPart.RELEVANT_MEMORY,
)
# `TurnContext.system_prompt_parts` keys that are not instructions (the persona, time, people, skills are).
_PART_OF_PROMPT_KEY = {
    "memory": PromptPart.LONG_TERM,
    "memory.pack": PromptPart.MEMORY_PACK,
    "memory.notes": PromptPart.DAILY_NOTES,
    "rag": PromptPart.RELEVANT_MEMORY,
}


def part_for_prompt_key(key: str) -> PromptPart:
    """Which part a key of `TurnContext.system_prompt_parts` belongs to."""
    return _PART_OF_PROMPT_KEY.get(key, PromptPart.INSTRUCTIONS)


@dataclass(frozen=True)
class PartUse:
    """What one part takes in the request, in tokens; `cut` when it was cut to its share."""

    part: PromptPart
    tokens: int
    cut: bool = False


@dataclass(frozen=True)
class ContextPlan:
    """A session's request against the budget: each part's share and real use, and the room left."""

    budget: ContextBudget
    uses: tuple[PartUse, ...]
    messages: int
    memory_enabled: bool = True
    rag_enabled: bool = True
    # False until a turn built the prompt parts (then their use is unknown, and counted as 0).
    prompt_measured: bool = False

    def used(self, part: PromptPart) -> int:
        return sum(use.tokens for use in self.uses if use.part is part)

    def cut(self, part: PromptPart) -> bool:
        return any(use.cut for use in self.uses if use.part is part)

    def given(self, share: str) -> int:
        """Tokens a share gives its parts (a switched-off memory or RAG is given nothing)."""
        if (share == MEMORY and not self.memory_enabled) or (share == RAG and not self.rag_enabled):
            return 0
        return self.budget.cap(share)

    def share_used(self, share: str) -> int:
        return sum(use.tokens for use in self.uses if use.part.share == share)

    @property
    def summary_tokens(self) -> int:
        return self.used(PromptPart.SUMMARY)

    @property
    def recent_tokens(self) -> int:
        return self.used(PromptPart.HISTORY)

    @property
    def message_tokens(self) -> int:
        """The conversation: the summary and the history."""
        return self.summary_tokens + self.recent_tokens

    @property
    def total_tokens(self) -> int:
        """The whole request as measured: every part's real use."""
        return sum(use.tokens for use in self.uses)

    @property
    def used_percent(self) -> int:
        """The request's share of the compaction threshold, in percent (as `/status` and `/context` show it)."""
        return round(100 * self.total_tokens / max(self.budget.trigger_tokens, 1))

    @property
    def reserved(self) -> dict[str, int]:
        """What the conversation must leave to the other parts. The parts context building makes are
        rebuilt after compaction for the coming message and may each grow to their share then, so
        they are kept their whole share; the tool schemas are known and kept what they take."""
        return {
            SYSTEM: self.given(SYSTEM),
            MEMORY: self.given(MEMORY),
            RAG: self.given(RAG),
            TOOLS: self.used(PromptPart.TOOL_SCHEMAS),
        }

    @property
    def room_for_messages(self) -> int:
        """What the conversation (summary and history) may take before it must be compacted."""
        return max(0, self.budget.trigger_tokens - sum(self.reserved.values()))

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

    @property
    def reply_reserve_tokens(self) -> int:
        """What the model may write back: outside the threshold (the threshold leaves room for it)."""
        return self.budget.model.max_output_tokens

    def with_prompt(self, uses: Iterable[PartUse]) -> ContextPlan:
        """This plan with the prompt parts as context building measured them."""
        built = [use for use in uses if use.part in BUILT_PARTS]
        kept = [use for use in self.uses if use.part not in BUILT_PARTS]
        return ContextPlan(
            self.budget, (*built, *kept), self.messages, self.memory_enabled, self.rag_enabled, prompt_measured=True
        )

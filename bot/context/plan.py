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
from typing import assert_never

from bot.context.budget import MEMORY, RAG, RECENT, SUMMARY, SYSTEM, TOOLS, ContextBudget
from bot.context.estimator import TokenEstimator
from bot.domain.turn import PromptSection

CUT_MARKER = "[… {part} cut here: it exceeded its share of the context ({total} tokens, share {cap})]"


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


def part_of(section: PromptSection) -> PromptPart:
    """The part of the request a system-prompt section counts in (and so the share it draws on)."""
    match section:
        case PromptSection.LONG_TERM:
            return PromptPart.LONG_TERM
        case PromptSection.MEMORY_PACK:
            return PromptPart.MEMORY_PACK
        case PromptSection.DAILY_NOTES:
            return PromptPart.DAILY_NOTES
        case PromptSection.RELEVANT_MEMORY:
            return PromptPart.RELEVANT_MEMORY
        case (
            PromptSection.PERSONA
            | PromptSection.TIME
            | PromptSection.PEOPLE
            | PromptSection.SKILLS
            | PromptSection.SKILL
        ):
            return PromptPart.INSTRUCTIONS
        case _:
            assert_never(section)


@dataclass(frozen=True)
class FittedPart:
    """One section fitted to its share: the tokens it had, the tokens it keeps, and its share's cap."""

    section: PromptSection
    share: str
    tokens: int
    kept_tokens: int
    cap: int

    @property
    def part(self) -> PromptPart:
        return part_of(self.section)

    @property
    def cut(self) -> bool:
        return self.kept_tokens < self.tokens


def fit_prompt_parts(
    parts: dict[PromptSection, str], budget: ContextBudget, estimator: TokenEstimator, model: str | None = None
) -> tuple[dict[PromptSection, str], list[FittedPart]]:
    """`parts` with each share's sections cut to the share's cap, and what each section had and keeps.

    Sections keep their order; within a share the earlier ones are kept whole first. A cut section ends
    with a marker saying what was cut, so neither the model nor a reader is misled by a silent gap.
    """
    fitted: dict[PromptSection, str] = {}
    report: list[FittedPart] = []
    used: dict[str, int] = {}
    for section, text in parts.items():
        share = part_of(section).share
        cap = budget.cap(share)
        tokens = estimator.text(text, model)
        room = cap - used.get(share, 0)
        if tokens <= room:
            fitted[section] = text
            used[share] = used.get(share, 0) + tokens
            report.append(FittedPart(section, share, tokens, tokens, cap))
            continue
        marker = CUT_MARKER.format(part=section.value, total=tokens, cap=cap)
        keep_chars = max(0, int((room - estimator.text(marker, model)) * estimator.ratio_for(model)))
        head = text[:keep_chars]
        if "\n" in head:
            head = head[: head.rfind("\n")]
        fitted[section] = f"{head}\n{marker}" if head else marker
        kept = estimator.text(fitted[section], model)
        used[share] = used.get(share, 0) + kept
        report.append(FittedPart(section, share, tokens, kept, cap))
    return fitted, report


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

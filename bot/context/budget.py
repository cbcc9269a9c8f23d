"""`ContextBudget`: the prompt size at which a conversation is compacted, and each part's share of it.

The threshold for a model is the smallest of `compaction.maxContextTokens`, `inputWindowShare` of
the model's input window, and the input window less the reserved output and a safety margin.

One allocator owns the whole prompt: the system prompt, the memory sections, `# Relevant Memory`
(RAG), the tool schemas, the conversation summary and the recent messages each get a share of the
threshold (`compaction.budgetShares`). A part longer than its share is cut with a visible marker
(`fit_prompt_parts`) instead of silently pushing another part out; what each part really uses, and
when the conversation must be compacted, is the `ContextPlan`'s to say (`bot.context.plan`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bot.context.estimator import TokenEstimator
from bot.llm.models import ModelSpec
from bot.settings import BudgetShares, CompactionConfig

# The shares of `BudgetShares`, in the order `/context` lists them.
SYSTEM, MEMORY, RAG, TOOLS, SUMMARY, RECENT = "system", "memory", "rag", "tools", "summary", "recent"
SHARE_NAMES = (SYSTEM, MEMORY, RAG, TOOLS, SUMMARY, RECENT)
CUT_MARKER = "[… {part} cut here: it exceeded its share of the context ({total} tokens, share {cap})]"


def share_for_part(part_name: str) -> str:
    """Which share a system-prompt part (a key of `TurnContext.system_prompt_parts`) draws on."""
    if part_name.startswith(MEMORY):
        return MEMORY
    if part_name.startswith(RAG):
        return RAG
    return SYSTEM


@dataclass(frozen=True)
class ContextBudget:
    """The compaction threshold for one model under the current configuration, and its shares."""

    model: ModelSpec
    trigger_tokens: int
    shares: BudgetShares
    keep_recent_ratio: float = 0.5

    @classmethod
    def for_model(cls, model: ModelSpec, config: CompactionConfig) -> ContextBudget:
        safety_margin = math.ceil(config.safety_margin_share * model.max_input_tokens)
        ceiling = model.max_input_tokens - model.max_output_tokens - safety_margin
        window = int(config.input_window_share * model.max_input_tokens)
        trigger = min(config.max_context_tokens, window, ceiling)
        return cls(model, max(trigger, 1), config.budget_shares, config.keep_recent_ratio)

    def cap(self, share_name: str) -> int:
        """Tokens the named share (`system`, `memory`, `rag`, `tools`, `summary`, `recent`) may take."""
        return int(getattr(self.shares, share_name) * self.trigger_tokens)

    @property
    def keep_recent_tokens(self) -> int:
        """How much of the recent conversation a compaction keeps verbatim: room is left to grow."""
        return max(1, int(self.cap(RECENT) * self.keep_recent_ratio))

    @property
    def summary_cap_tokens(self) -> int:
        return max(1, self.cap(SUMMARY))


@dataclass(frozen=True)
class FittedPart:
    """One prompt part fitted to its share: the tokens it had, the tokens it keeps, and its share's cap."""

    name: str
    share: str
    tokens: int
    kept_tokens: int
    cap: int

    @property
    def cut(self) -> bool:
        return self.kept_tokens < self.tokens


def fit_prompt_parts(
    parts: dict[str, str], budget: ContextBudget, estimator: TokenEstimator, model: str | None = None
) -> tuple[dict[str, str], list[FittedPart]]:
    """`parts` with each share's parts cut to the share's cap, and what each part had and keeps.

    Parts keep their order; within a share the earlier parts are kept whole first. A cut part ends
    with a marker saying what was cut, so neither the model nor a reader is misled by a silent gap.
    """
    fitted: dict[str, str] = {}
    report: list[FittedPart] = []
    used: dict[str, int] = {}
    for name, text in parts.items():
        share = share_for_part(name)
        cap = budget.cap(share)
        tokens = estimator.text(text, model)
        room = cap - used.get(share, 0)
        if tokens <= room:
            fitted[name] = text
            used[share] = used.get(share, 0) + tokens
            report.append(FittedPart(name, share, tokens, tokens, cap))
            continue
        marker = CUT_MARKER.format(part=name, total=tokens, cap=cap)
        keep_chars = max(0, int((room - estimator.text(marker, model)) * estimator.ratio_for(model)))
        head = text[:keep_chars]
        if "\n" in head:
            head = head[: head.rfind("\n")]
        fitted[name] = f"{head}\n{marker}" if head else marker
        kept = estimator.text(fitted[name], model)
        used[share] = used.get(share, 0) + kept
        report.append(FittedPart(name, share, tokens, kept, cap))
    return fitted, report

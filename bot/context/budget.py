"""`ContextBudget`: the prompt size at which a conversation is compacted, and each part's share of it.

The threshold for a model is the smallest of `compaction.maxContextTokens`, `inputWindowShare` of
the model's input window, and the input window less the reserved output and a safety margin.

One allocator owns the whole prompt: the system prompt, the memory sections, `# Relevant Memory`
(RAG), the tool schemas, the conversation summary and the recent messages each get a share of the
threshold (`compaction.budgetShares`). A part longer than its share is cut with a visible marker
(`bot.context.plan.fit_prompt_parts`) instead of silently pushing another part out; what each part
really uses, and when the conversation must be compacted, is the `ContextPlan`'s to say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bot.llm.models import ModelSpec
from bot.settings import BudgetShares, CompactionConfig

# The shares of `BudgetShares`, in the order `/context` lists them.
SYSTEM, MEMORY, RAG, TOOLS, SUMMARY, RECENT = "system", "memory", "rag", "tools", "summary", "recent"
SHARE_NAMES = (SYSTEM, MEMORY, RAG, TOOLS, SUMMARY, RECENT)


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

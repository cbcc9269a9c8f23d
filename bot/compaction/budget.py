"""`ContextBudget`: the prompt size at which a conversation must be compacted for a model."""

from __future__ import annotations

from dataclasses import dataclass

from bot.llm.models import ModelSpec
from bot.settings import CompactionConfig

# Share of the model's input window to fill at most, leaving room for estimate error.
INPUT_WINDOW_SHARE = 0.8
# Tokens kept free beyond the reserved output, for the provider's own framing.
SAFETY_MARGIN_TOKENS = 1024


@dataclass(frozen=True)
class ContextBudget:
    """The compaction trigger for one model under the current configuration."""

    model: ModelSpec
    trigger_tokens: int

    @classmethod
    def for_model(cls, model: ModelSpec, config: CompactionConfig) -> ContextBudget:
        ceiling = model.max_input_tokens - model.max_output_tokens - SAFETY_MARGIN_TOKENS
        trigger = min(config.max_context_tokens, int(INPUT_WINDOW_SHARE * model.max_input_tokens), ceiling)
        return cls(model, max(trigger, 1))

"""The budget: the threshold for a model, each part's share, and parts cut visibly to their share."""

from __future__ import annotations

import pytest

from bot.context.budget import ContextBudget
from bot.context.estimator import TokenEstimator
from bot.context.plan import fit_prompt_parts
from bot.domain.turn import PromptSection
from bot.llm.models import ModelSpec, Tier
from bot.settings import BudgetShares, CompactionConfig


def spec(max_input: int, max_output: int) -> ModelSpec:
    return ModelSpec("m", max_input, max_output, Tier.BALANCED, True)


@pytest.mark.parametrize(
    ("max_input", "max_output", "expected"),
    [
        (128_000, 16_384, 50_000),  # maxContextTokens binds
        (32_768, 4_096, 26_214),  # 0.8 × maxInputTokens binds
        (16_385, 8_000, 7_565),  # maxInput − maxOutput − 5% binds
        (4_000, 500, 3_200),
    ],
)
def test_the_threshold_is_the_smallest_of_the_three_limits(max_input: int, max_output: int, expected: int) -> None:
    assert ContextBudget.for_model(spec(max_input, max_output), CompactionConfig()).trigger_tokens == expected


def test_the_threshold_follows_the_configuration() -> None:
    config = CompactionConfig(max_context_tokens=2000, safety_margin_share=0.0, input_window_share=1.0)
    assert ContextBudget.for_model(spec(4000, 500), config).trigger_tokens == 2000


def test_shares_must_not_add_up_to_more_than_the_whole() -> None:
    with pytest.raises(ValueError, match="add up to"):
        BudgetShares(system=0.5, memory=0.5, recent=0.5)


def test_a_part_over_its_share_is_cut_with_a_visible_marker_and_others_are_untouched() -> None:
    budget = ContextBudget.for_model(spec(4000, 500), CompactionConfig())  # memory cap 480 tokens
    estimator = TokenEstimator()
    long_memory = "\n".join(f"- remembered fact number {n}" for n in range(300))
    persona, memory, rag = PromptSection.PERSONA, PromptSection.LONG_TERM, PromptSection.RELEVANT_MEMORY
    parts = {persona: "You are helpful.", memory: long_memory, rag: "# Relevant Memory\nsomething"}

    fitted, report = fit_prompt_parts(parts, budget, estimator)

    assert fitted[persona] == parts[persona] and fitted[rag] == parts[rag]
    assert fitted[memory].startswith("- remembered fact number 0\n")
    assert fitted[memory].endswith("]") and "memory cut here: it exceeded its share" in fitted[memory]
    assert estimator.text(fitted[memory]) <= budget.cap("memory")
    usage = {part.section: part for part in report}
    assert usage[memory].cut and not usage[persona].cut and not usage[rag].cut
    assert usage[memory].tokens == estimator.text(long_memory)
    assert usage[memory].kept_tokens == estimator.text(fitted[memory]) <= usage[memory].cap

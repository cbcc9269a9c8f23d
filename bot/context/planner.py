"""`ContextPlanner`: the one place that measures a session's request against the budget (`ContextPlan`).

A turn's plan is made in two steps. Before the prompt is built, `plan` measures the conversation and
the tool schemas (compaction's trigger reads this at 18, and context building reads the memory and
RAG shares from it at 20); then context building fits the prompt parts to their shares and completes
the plan with what they took (`fit_prompt`). The completed plan is the turn's; its prompt parts are
kept in the session's metadata (`lastPromptTokens`), so `/status`, `/context` and `python -m bot
status`, which ask `plan` too, show the same real figures: the parts of the last request and the
conversation as it stands now. Before a chat's first answered message, the prompt parts are not
measured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.context.budget import ContextBudget, fit_prompt_parts
from bot.context.estimator import TokenEstimator
from bot.context.plan import BUILT_PARTS, ContextPlan, PartUse, PromptPart, part_for_prompt_key
from bot.domain.conversation import split_summary
from bot.domain.session import AgentSession
from bot.domain.session_metadata import PromptTokens
from bot.llm.models import ModelRegistry
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

# In the session's `lastPromptTokens` (`{part value: tokens}`): the parts that were cut to their share.
CUT_KEY = "cut"


class ContextPlanner:
    """Makes `ContextPlan`s with the one `TokenEstimator` and the model limits of the registry."""

    def __init__(
        self,
        estimator: TokenEstimator,
        models: ModelRegistry,
        tool_schemas: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        self._estimator = estimator
        self._models = models
        self._tool_schemas = tool_schemas

    @property
    def estimator(self) -> TokenEstimator:
        return self._estimator

    def budget(self, model: str, config: RuntimeConfig) -> ContextBudget:
        return ContextBudget.for_model(self._models.lookup(model), config.compaction)

    def plan(self, session: AgentSession, model: str, config: RuntimeConfig) -> ContextPlan:
        """The session's request as it stands: the conversation and the tool schemas measured now, the
        prompt parts as the last turn built them (not measured before the first turn)."""
        summary, history = split_summary(session.messages)
        images = config.media.images_sent  # older images count as the text stand-ins they are sent as
        uses = [
            PartUse(PromptPart.SUMMARY, self._estimator.messages(summary, model, images)),
            PartUse(PromptPart.HISTORY, self._estimator.messages(history, model, images)),
            PartUse(PromptPart.TOOL_SCHEMAS, self._estimator.tool_schemas(self._tool_schemas(), model)),
        ]
        plan = ContextPlan(
            self.budget(model, config), tuple(uses), len(session.messages), config.memory.enabled, config.rag.enabled
        )
        last = session.metadata.last_prompt_tokens
        if last is None:
            return plan
        cut = last.get(CUT_KEY)
        cut_parts = cut if isinstance(cut, list) else []
        return plan.with_prompt(
            PartUse(part, _tokens(last.get(part.value)), part.value in cut_parts) for part in BUILT_PARTS
        )

    def fit_prompt(
        self, session: AgentSession, plan: ContextPlan, parts: dict[str, str], model: str
    ) -> tuple[dict[str, str], ContextPlan]:
        """`parts` (`TurnContext.system_prompt_parts`) each within its share, and the turn's plan
        completed with what they take; the session keeps the figures for `/status` and `/context`."""
        fitted, report = fit_prompt_parts(parts, plan.budget, self._estimator, model)
        tokens = {part: 0 for part in BUILT_PARTS}
        cut: set[PromptPart] = set()
        for fitted_part in report:
            part = part_for_prompt_key(fitted_part.name)
            tokens[part] += fitted_part.kept_tokens
            if fitted_part.cut:
                cut.add(part)
                log.warning(
                    "[Context] %s cut to its share: %d of %d tokens kept",
                    fitted_part.name, fitted_part.kept_tokens, fitted_part.tokens,
                )  # fmt: skip
        kept: PromptTokens = {part.value: count for part, count in tokens.items()}
        if cut:
            kept[CUT_KEY] = sorted(part.value for part in cut)
        session.metadata.last_prompt_tokens = kept
        return fitted, plan.with_prompt(PartUse(part, count, part in cut) for part, count in tokens.items())


def _tokens(value: int | list[str] | None) -> int:
    return value if isinstance(value, int) else 0

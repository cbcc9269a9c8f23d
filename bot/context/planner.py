"""`ContextPlanner`: the one place that measures a session's request against the budget (`ContextPlan`).

A turn's plan is made in two steps. Before the prompt is built, `plan` measures the conversation and
the tool schemas (compaction's trigger reads this at 18, and context building reads the memory and
RAG shares from it at 20); then context building fits the prompt parts to their shares and completes
the plan with what they took (`fit_prompt`). The completed plan is the turn's; its prompt parts are
kept in the session's metadata (`lastPromptTokens`), so `/status`, `/context` and `python -m bot
status`, which ask `plan` too, show the same real figures: the parts of the last request and the
conversation as it stands now. Before a chat's first answered message, the prompt parts are not
measured.

The budget is planned for the window the model really has: the registry's, or the smaller one learned
from the endpoint (a refusal that stated it, or a silent cut seen in the reported usage: `observe_usage`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from bot.context.budget import TOOLS, ContextBudget
from bot.context.estimator import TokenEstimator
from bot.context.plan import BUILT_PARTS, ContextPlan, PartUse, PromptPart, fit_prompt_parts
from bot.context.silent_cut import CALIBRATED_SAMPLES, SilentCuts, Verdict
from bot.domain.conversation import split_summary
from bot.domain.session import AgentSession
from bot.domain.session_metadata import PromptTokens
from bot.domain.turn import PromptSection
from bot.llm.models import ModelRegistry, ModelSpec
from bot.llm.windows import REFUSAL, SILENT_CUT
from bot.llm.wire import WireSize
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
        self._silent_cuts = SilentCuts()
        # The tools last offered when not all fitted: (the registry's list, the names kept, the list handed out),
        # so the same list goes out while the choice stays the same (the client keeps its JSON by identity).
        self._fitted_tools: tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]] | None = None

    @property
    def estimator(self) -> TokenEstimator:
        return self._estimator

    @property
    def silent_cuts(self) -> SilentCuts:
        return self._silent_cuts

    def budget(self, model: str, config: RuntimeConfig) -> ContextBudget:
        return ContextBudget.for_model(self._models.lookup(model), config.compaction)

    def offered_tools(self, model: str, config: RuntimeConfig) -> list[dict[str, Any]]:
        """The tool schemas the model is offered: every tool while they fit the tools share of the plan, else the
        tools that fit, in the registry's order (a model with a small window is offered fewer)."""
        schemas = self._tool_schemas()
        cap = self.budget(model, config).cap(TOOLS)
        if self._estimator.tool_schemas(schemas, model) <= cap:
            return schemas
        kept: list[dict[str, Any]] = []
        used = 0
        for schema in schemas:
            cost = self._estimator.text(json.dumps(schema, ensure_ascii=False), model)
            if used + cost <= cap:
                kept.append(schema)
                used += cost
        names = [_tool_name(schema) for schema in kept]
        last = self._fitted_tools
        if last is not None and last[0] is schemas and last[1] == names:
            return last[2]
        log.warning(
            "[Context] %d of %d tools offered to %s: the tool definitions would take ~%d tokens, their share is %d",
            len(kept), len(schemas), model, self._estimator.tool_schemas(schemas, model), cap,
        )  # fmt: skip
        self._fitted_tools = (schemas, names, kept)
        return kept

    def model(self, model: str) -> ModelSpec:
        """The limits `model` is planned with (a window learned from the endpoint included)."""
        return self._models.lookup(model)

    def learn_refusal(self, model: str, window_tokens: int | None) -> bool:
        """The endpoint refused a prompt as too long, stating `window_tokens`; True when the window is news
        (every part is then planned for it)."""
        return window_tokens is not None and self._models.learn_window(model, window_tokens, REFUSAL)

    def observe_usage(
        self,
        model: str,
        conversation: str | None,
        sent: WireSize,
        tools: list[dict[str, Any]] | None,
        prompt_tokens: int,
        cut_ratio: float,
    ) -> bool:
        """The provider's `prompt_tokens` for a request of `sent` in `conversation` (None for a request of its
        own, a summary's): calibrates the estimate when the prompt arrived whole; learns the window it kept
        when the endpoint dropped part of it without a word (`SilentCuts` tells which). True when a window
        was learned."""
        estimator = self._estimator
        calibrated = estimator.exact_counter(model) is not None or estimator.samples_for(model) >= CALIBRATED_SAMPLES
        size = estimator.with_tools(sent, tools)
        judgement = self._silent_cuts.judge(
            model, conversation, size, prompt_tokens, lambda of: estimator.sized(model, of), cut_ratio, calibrated
        )
        if judgement.verdict is Verdict.CUT:
            return self._models.learn_window(model, prompt_tokens, SILENT_CUT, judgement.evidence)
        if judgement.verdict is Verdict.WHOLE:
            estimator.observe_request(model, sent, tools, prompt_tokens)
        return False

    def plan(self, session: AgentSession, model: str, config: RuntimeConfig) -> ContextPlan:
        """The session's request as it stands: the conversation and the tool schemas measured now, the
        prompt parts as the last turn built them (not measured before the first turn)."""
        summary, history = split_summary(session.messages)
        images = config.media.images_sent  # older images count as the text stand-ins they are sent as
        uses = [
            PartUse(PromptPart.SUMMARY, self._estimator.messages(summary, model, images)),
            PartUse(PromptPart.HISTORY, self._estimator.messages(history, model, images)),
            PartUse(PromptPart.TOOL_SCHEMAS, self._estimator.tool_schemas(self.offered_tools(model, config), model)),
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
        self, session: AgentSession, plan: ContextPlan, parts: dict[PromptSection, str], model: str
    ) -> tuple[dict[PromptSection, str], ContextPlan]:
        """`parts` (`TurnContext.system_prompt_parts`) each within its share, and the turn's plan
        completed with what they take; the session keeps the figures for `/status` and `/context`."""
        fitted, report = fit_prompt_parts(parts, plan.budget, self._estimator, model)
        tokens = {part: 0 for part in BUILT_PARTS}
        cut: set[PromptPart] = set()
        for fitted_part in report:
            part = fitted_part.part
            tokens[part] += fitted_part.kept_tokens
            if fitted_part.cut:
                cut.add(part)
                log.warning(
                    "[Context] %s cut to its share: %d of %d tokens kept",
                    fitted_part.section.value, fitted_part.kept_tokens, fitted_part.tokens,
                )  # fmt: skip
        kept: PromptTokens = {part.value: count for part, count in tokens.items()}
        if cut:
            kept[CUT_KEY] = sorted(part.value for part in cut)
        session.metadata.last_prompt_tokens = kept
        return fitted, plan.with_prompt(PartUse(part, count, part in cut) for part, count in tokens.items())


def _tool_name(schema: dict[str, Any]) -> str:
    function = schema.get("function")
    return str(function.get("name", "")) if isinstance(function, dict) else ""


def _tokens(value: int | list[str] | None) -> int:
    return value if isinstance(value, int) else 0

"""AutoCompactionSystem (18): compacts the conversation before the model call when it would not fit.

It runs after the user's message is in the session and before the prompt is built (20) and sent
(30). It compacts when the estimate of the whole prompt (the conversation, plus the shares kept for
the system prompt, memory and RAG, plus the tool schemas) exceeds the model's threshold, or when the
provider reported the previous prompt over it. When nothing is to be compacted, the plan it checked is
the turn's (`TurnContext.plan`): ContextBuilding (20) does not make it again. A failed compaction never
ends the turn: it is logged, and the tool loop's payload-too-large recovery is the next line of defence.
"""

from __future__ import annotations

import logging

from bot.compaction.service import CompactionService
from bot.pipeline.system import PipelineSystem
from bot.pipeline.turn import TurnContext

log = logging.getLogger(__name__)


class AutoCompactionSystem(PipelineSystem):
    order = 18
    name = "AutoCompact"

    def __init__(self, compaction: CompactionService) -> None:
        self._compaction = compaction

    @property
    def compaction(self) -> CompactionService:
        return self._compaction

    def enabled(self, ctx: TurnContext) -> bool:
        return ctx.config.compaction.enabled

    async def process(self, ctx: TurnContext) -> None:
        try:
            plan = self._compaction.planner.plan(ctx.session, ctx.model, ctx.config)
            if self._compaction.trigger_reason(ctx.session, plan) is None:
                ctx.plan = plan  # the conversation stays as it is: the turn's plan, which 20 starts from
                return
            await self._compaction.compact_if_needed(ctx.session, ctx.model, ctx.config, plan)
        except Exception:
            log.exception("[AutoCompact] Could not check or compact %s; answering without compacting", ctx.session.id)

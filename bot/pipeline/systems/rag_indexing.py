"""RagIndexingSystem (55): puts the finished exchange on the RAG indexing queue, after the reply.

It only appends to the durable queue in the workspace (an fsynced line, a few milliseconds); the
model calls of graph extraction happen later, in batches, when the scheduler flushes the queue.
`retract` forgets the document of an exchange that /retry or /undo dropped (queued or indexed).
"""

from __future__ import annotations

import logging

from bot.clock import Clock
from bot.domain.message import Message, Role
from bot.pipeline.system import PipelineSystem
from bot.pipeline.turn import TurnContext
from bot.rag.service import RagService

log = logging.getLogger(__name__)


class RagIndexingSystem(PipelineSystem):
    order = 55
    name = "RagIndexing"
    after_reply = True

    def __init__(self, rag: RagService, clock: Clock) -> None:
        self._rag = rag
        self._clock = clock

    @property
    def rag(self) -> RagService:
        return self._rag

    def enabled(self, ctx: TurnContext) -> bool:
        return ctx.config.rag.enabled and bool(ctx.reply_text)

    async def process(self, ctx: TurnContext) -> None:
        answers = [m.id for m in ctx.new_messages if m.role is Role.ASSISTANT and m.content]
        try:
            await self._rag.enqueue(
                ctx.config,
                ctx.session.id,
                self._clock.now(),
                ctx.user_message.content,
                ctx.reply_text or "",
                [ctx.user_message.id, *answers[-1:]],
            )
        except OSError as error:
            log.warning("[RAG] Could not queue the exchange for indexing: %s", error)

    async def retract(self, dropped: list[Message]) -> None:
        """Forget the knowledge-graph document made from these messages, if any; failures are logged."""
        try:
            await self._rag.forget_documents(await self._rag.documents_for_messages([m.id for m in dropped]))
        except Exception:
            log.exception("[RAG] Could not forget the document of a dropped exchange")

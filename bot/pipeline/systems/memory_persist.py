"""MemoryPersistSystem (50): records the finished exchange in memory, after the reply was delivered.

It dual-writes: the daily note line (`memory/YYYY-MM-DD.md`, while `legacyDailyNotesEnabled`) and
the structured turn (`TurnMemoryEvent` → EPISODIC item plus extracted facts and procedures). Each
write is fail-safe on its own: a full disk or a permission error is one warning, and the reply,
already sent, is unaffected.
"""

from __future__ import annotations

import asyncio
import logging

from bot.clock import Clock
from bot.domain.memory import TurnMemoryEvent
from bot.domain.message import Role
from bot.domain.turn import TurnContext
from bot.memory.service import MemoryService
from bot.pipeline.system import PipelineSystem

log = logging.getLogger(__name__)


def previous_assistant_text(ctx: TurnContext) -> str:
    """The assistant's answer before this turn's user message (what a "that worked" refers to)."""
    messages = ctx.session.messages
    ids = [message.id for message in messages]
    start = ids.index(ctx.user_message.id) if ctx.user_message.id in ids else len(messages)
    for message in reversed(messages[:start]):
        if message.role is Role.ASSISTANT and message.content:
            return message.content
    return ""


class MemoryPersistSystem(PipelineSystem):
    order = 50
    name = "MemoryPersist"
    after_reply = True

    def __init__(self, memory: MemoryService, clock: Clock) -> None:
        self._memory = memory
        self._clock = clock

    def enabled(self, ctx: TurnContext) -> bool:
        return ctx.config.memory.enabled and bool(ctx.reply_text)

    async def process(self, ctx: TurnContext) -> None:
        answers = [message for message in ctx.new_messages if message.role is Role.ASSISTANT and message.content]
        event = TurnMemoryEvent(
            session_id=ctx.session.id,
            user_text=ctx.user_message.content,
            assistant_text=ctx.reply_text or "",
            timestamp=self._clock.now(),
            user_message_id=ctx.user_message.id,
            assistant_message_id=answers[-1].id if answers else None,
            tool_names=tuple(sorted({m.name for m in ctx.new_messages if m.role is Role.TOOL and m.name})),
        )
        # The two writes touch different files: done side by side, the chat's next message waits less.
        await asyncio.gather(self._append_note(ctx, event), self._record(ctx, event))

    async def _append_note(self, ctx: TurnContext, event: TurnMemoryEvent) -> None:
        if not ctx.config.memory.legacy_daily_notes_enabled:
            return
        try:
            line = await self._memory.append_daily_note(ctx.config.memory, event)
        except OSError as error:
            log.warning("[MemoryPersist] Could not append the daily note: %s", error)
            return
        log.info("[MemoryPersist] Appended memory entry (%d chars)", len(line))

    async def _record(self, ctx: TurnContext, event: TurnMemoryEvent) -> None:
        try:
            # The optional LLM extraction is background work: the cheaper model when one is configured.
            model = ctx.config.llm.balanced_model or ctx.model
            report = await self._memory.record_turn(ctx.config.memory, event, previous_assistant_text(ctx), model)
        except OSError as error:
            log.warning("[MemoryPersist] Could not write the memory items: %s", error)
            return
        log.info("[MemoryPersist] Structured memory: %s", report.describe())

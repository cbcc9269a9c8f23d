"""MemoryPersistSystem (50): records the finished exchange in memory, after the reply was delivered.

It dual-writes: the daily note line (`memory/YYYY-MM-DD.md`, while `legacyDailyNotesEnabled`) and
the structured turn (`TurnMemoryEvent` → EPISODIC item plus extracted facts and procedures). Each
write is fail-safe on its own: a full disk or a permission error is one warning, and the reply,
already sent, is unaffected.

In a group, what a person said is recorded as "Name: text" (note line, turn and facts), so the
group's memory never mixes people and "I" in a fact means its sender. Under `memory.scope: user` the
turn is also written, in the person's own words, to that person's memory, which follows them into
their private chat with the bot and no one else's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from bot.clock import Clock
from bot.domain.memory import TurnMemoryEvent
from bot.domain.message import Role
from bot.domain.turn import TurnContext
from bot.memory.paths import person_memory_key
from bot.memory.service import MemoryService
from bot.pipeline.system import PipelineSystem
from bot.pipeline.turn_storage import is_group_chat
from bot.skills.tools import active_skill

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
        sender = ctx.user_message.sender
        in_group = is_group_chat(ctx)
        said = ctx.user_message.content
        event = TurnMemoryEvent(
            session_id=ctx.session.id,
            user_text=f"{sender.name}: {said}" if in_group and sender is not None else said,
            speaker=sender.name if in_group and sender is not None else None,
            assistant_text=ctx.reply_text or "",
            timestamp=self._clock.now(),
            user_message_id=ctx.user_message.id,
            assistant_message_id=answers[-1].id if answers else None,
            tool_names=tuple(sorted({m.name for m in ctx.new_messages if m.role is Role.TOOL and m.name})),
            skill=active_skill(ctx.session),
        )
        writes = [self._append_note(ctx, event), self._record(ctx, event)]
        if in_group and sender is not None and ctx.config.memory.scope == "user":
            own = dataclasses.replace(
                event, user_text=said, speaker=None, memory_key=person_memory_key(ctx.session.channel_type, sender.id)
            )
            writes += [self._append_note(ctx, own), self._record(ctx, own)]
        # The writes touch different files: done side by side, the chat's next message waits less.
        await asyncio.gather(*writes)

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

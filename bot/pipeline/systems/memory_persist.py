"""MemoryPersistSystem (50): records the finished exchange in memory, after the reply was delivered.

It dual-writes: the daily note line (`memory/YYYY-MM-DD.md`, while `legacyDailyNotesEnabled`) and
the structured turn (`TurnMemoryEvent` → EPISODIC item plus extracted facts and procedures). Each
write is fail-safe on its own: a full disk or a permission error is one warning, and the reply,
already sent, is unaffected.

In a group, what a person said is recorded as "Name: text" (note line, turn and facts), so the
group's memory never mixes people and "I" in a fact means its sender. Under `memory.scope: user` and
`global` the turn is also written, in the person's own words, to that person's memory (the owner's is
the owner's memory), which follows them into their private chat with the bot and no one else's.

`retract` takes back what it wrote for an exchange that /retry or /undo dropped from the session:
the note lines and the items, found from the same events, so memory never keeps a discarded answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime

from bot.clock import Clock
from bot.domain.memory import TurnMemoryEvent
from bot.domain.message import Message, Role, forwarded_note
from bot.domain.session import AgentSession
from bot.memory.paths import person_memory_key
from bot.memory.service import MemoryService
from bot.pipeline.system import PipelineSystem
from bot.pipeline.turn import TurnContext
from bot.pipeline.turn_storage import is_group_chat
from bot.settings import MemoryConfig
from bot.skills.tools import active_skill

log = logging.getLogger(__name__)


def previous_assistant_text(ctx: TurnContext) -> str:
    """The assistant's answer before this turn's user message (what a "that worked" refers to)."""
    messages = ctx.session.messages
    # Looked for from the end, where the turn's message is: the whole history is not walked every turn.
    wanted = ctx.user_message.id
    start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id == wanted), len(messages))
    for index in range(start - 1, -1, -1):
        message = messages[index]
        if message.role is Role.ASSISTANT and message.content:
            return message.content
    return ""


def turn_events(
    session: AgentSession,
    user_message: Message,
    turn_messages: list[Message],
    reply_text: str,
    now: datetime,
    *,
    in_group: bool,
    config: MemoryConfig,
) -> list[TurnMemoryEvent]:
    """What memory records of a finished turn, one event per memory it goes to: the chat's and, in a
    group, the sender's own (in their own words), unless every chat shares one memory (`chat` keeps
    each chat apart and nothing else; `memory.ownerMemoryEverywhere` makes the group's memory everyone's)."""
    answers = [message for message in turn_messages if message.role is Role.ASSISTANT and message.content]
    sender = user_message.sender if in_group else None
    said = user_message.content
    # A forwarded message's words are its author's: the facts drawn from it are recorded in their name (the
    # note on a line of its own, so that no fact takes it in).
    author = user_message.forwarded_from
    if author is not None:
        said = f"{forwarded_note(author)}\n{said}"
    event = TurnMemoryEvent(
        session_id=session.id,
        user_text=f"{sender.name}: {said}" if sender is not None else said,
        speaker=author or (sender.name if sender is not None else None),
        assistant_text=reply_text,
        timestamp=now,
        user_message_id=user_message.id,
        assistant_message_id=answers[-1].id if answers else None,
        tool_names=tuple(sorted({m.name for m in turn_messages if m.role is Role.TOOL and m.name})),
        skill=active_skill(session),
    )
    if sender is None or config.scope == "chat" or (config.scope == "global" and config.owner_memory_everywhere):
        return [event]
    own_key = person_memory_key(session.channel_type, sender.id)
    return [event, dataclasses.replace(event, user_text=said, speaker=author, memory_key=own_key)]


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
        events = turn_events(
            ctx.session,
            ctx.user_message,
            ctx.new_messages,
            ctx.reply_text or "",
            self._clock.now(),
            in_group=is_group_chat(ctx),
            config=ctx.config.memory,
        )
        writes = [write for event in events for write in (self._append_note(ctx, event), self._record(ctx, event))]
        # The writes touch different files: done side by side, the chat's next message waits less.
        await asyncio.gather(*writes)

    async def retract(self, session: AgentSession, dropped: list[Message], config: MemoryConfig) -> None:
        """Take back the memory written for the exchange `dropped` (a user message and its answer), which
        /retry or /undo removed from the session. Failures are logged: the command still does its work."""
        user = next((message for message in dropped if message.role is Role.USER), None)
        answers = [message for message in dropped if message.role is Role.ASSISTANT and message.content]
        if not config.enabled or user is None or not answers:
            return  # nothing was written for an exchange without an answer
        events = turn_events(
            session,
            user,
            dropped,
            answers[-1].content,
            answers[-1].timestamp,
            in_group=session.metadata.is_group,
            config=config,
        )
        # The note line has the time it was written (just after the answer), on that day or the message's.
        days = [moment.astimezone(self._clock.zone).date() for moment in (answers[-1].timestamp, user.timestamp)]
        for event in events:
            try:
                await self._memory.retract_turn(config, event, days)
            except OSError as error:
                log.warning("[MemoryPersist] Could not take back a dropped exchange: %s", error)

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

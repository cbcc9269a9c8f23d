"""`TurnTraces`: what went into each of a chat's recent replies, for the console's "why this reply" page.

The runner hands every answered turn here as soon as its reply went out (before memory and RAG are
written, which add nothing to it). A trace is built from what the turn already carries (`TurnContext`:
the plan, the memory pack, the prompt parts, the new messages, the usage): no system records anything
for it. Keeping it is handed over to a task of its own, so the reply never waits for a store, and a
store that fails costs a log line and nothing else.

Only the last `console.turnsKept` turns of each chat are kept, in a `TraceStore`: the workspace's files
(`bot.pipeline.trace_files`), or PostgreSQL with `BOT_DATABASE_URL` (`bot.pipeline.trace_table`), where
every replica writes and the console of any replica reads every replica's turns. They are a window on
the bot at work, not a history (the session and its archive are that): `migrate` and `export` leave them.
A memory item forgotten is forgotten in the traces too: its text is no longer shown (`redacted`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bot.context.plan import ContextPlan
from bot.domain.memory import MemoryItem, MemoryPack
from bot.domain.message import Message
from bot.domain.turn import PromptSection
from bot.pipeline.trace_records import PackEntry, PlanPart, TokenUse, ToolUse, TraceStore, TurnTrace
from bot.pipeline.turn import TurnContext

log = logging.getLogger(__name__)

# A tool's result is shown up to this many characters (tool outputs can be whole web pages).
TOOL_RESULT_CHARS = 2000


class TurnTraces:
    """The recent turns of each chat (`console.turnsKept`), kept in a `TraceStore` off the reply's path."""

    def __init__(self, store: TraceStore, kept: Callable[[], int]) -> None:
        self._store = store
        self._kept = kept
        self._writing: set[asyncio.Task[None]] = set()

    def record(self, ctx: TurnContext, reply_seconds: float = 0.0) -> None:
        """Hand the turn's trace to the store, without waiting for it."""
        self.keep(trace_of(ctx, reply_seconds))

    def keep(self, trace: TurnTrace) -> None:
        """Hand `trace` to the store, without waiting for it (`settle` waits)."""
        task = asyncio.create_task(self._keep(trace), name=f"trace of {trace.session_id}")
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _keep(self, trace: TurnTrace) -> None:
        try:
            await self._store.add(trace, self._kept_now())
        except OSError as error:
            log.error("[Console] The trace of a turn of %s was not kept: %s", trace.session_id, error)
        except Exception:
            log.exception("[Console] The trace of a turn of %s was not kept", trace.session_id)

    def _kept_now(self) -> int:
        return max(self._kept(), 1)

    async def chats(self) -> list[str]:
        return await self._store.chats()

    async def of(self, session_id: str) -> list[TurnTrace]:
        """The chat's kept turns, the newest last."""
        return await self._store.of(session_id, self._kept_now())

    async def recent(self, limit: int) -> list[TurnTrace]:
        return await self._store.recent(limit)

    async def forget(self, items: list[MemoryItem]) -> None:
        """Forgotten memory items are forgotten in the traces too; a store that fails is logged."""
        try:
            changed = await self._store.forget(items)
        except OSError as error:
            log.error("[Console] %d forgotten items may still show in the traces: %s", len(items), error)
            return
        if changed:
            log.info("[Console] Forgot %d items in %d traces", len(items), changed)

    async def settle(self) -> None:
        """Wait for the traces being kept (at a stop, before the stores close)."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)


def trace_of(ctx: TurnContext, reply_seconds: float = 0.0) -> TurnTrace:
    pack = ctx.memory_pack
    return TurnTrace(
        turn_id=ctx.turn_id,
        session_id=ctx.session.id,
        at=ctx.user_message.timestamp,
        question=ctx.user_message.content,
        reply=ctx.reply_text or "",
        model=ctx.model,
        plan=_plan_parts(ctx.plan),
        threshold_tokens=ctx.plan.budget.trigger_tokens if ctx.plan is not None else 0,
        packed=_packed(pack),
        missed=pack.diagnostics.missed if pack is not None else (),
        pack_summary=pack.diagnostics.describe() if pack is not None else "",
        graph=ctx.system_prompt_parts.get(PromptSection.RELEVANT_MEMORY, ""),
        tools=_tools(ctx.new_messages),
        tokens=tuple(TokenUse(u.model, u.prompt_tokens, u.completion_tokens, u.cached_tokens) for u in ctx.usages),
        reply_seconds=reply_seconds,
    )


def _plan_parts(plan: ContextPlan | None) -> tuple[PlanPart, ...]:
    if plan is None:
        return ()
    return tuple(
        PlanPart(use.part.label, use.part.share, use.tokens, plan.given(use.part.share), use.cut) for use in plan.uses
    )


def _packed(pack: MemoryPack | None) -> tuple[PackEntry, ...]:
    if pack is None:
        return ()
    return tuple(
        PackEntry(scored.item.id, scored.item.content, scored.section, scored.score, dict(scored.parts))
        for scored in pack.items
    )


def _tools(messages: list[Message]) -> tuple[ToolUse, ...]:
    results = {message.tool_call_id: message.content for message in messages if message.tool_call_id}
    return tuple(
        ToolUse(call.name, call.arguments, results.get(call.id, "")[:TOOL_RESULT_CHARS])
        for message in messages
        for call in message.tool_calls or ()
    )

"""`TurnTraces`: what went into each of a chat's recent replies, for the console's "why this reply" page.

The runner hands every answered turn here as soon as its reply went out (before memory and RAG are
written, which add nothing to it), so keeping a trace costs the reply nothing. A trace is built from
what the turn already carries (`TurnContext`: the plan, the memory pack, the prompt parts, the new
messages, the usage): no system records anything for it. Only the last `console.turnsKept` turns of
each chat are kept, in memory: they are a window on the bot at work, not a history (the session and
its archive are that).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bot.context.plan import ContextPlan
from bot.domain.memory import MemoryPack
from bot.domain.message import Message
from bot.domain.turn import PromptSection
from bot.pipeline.turn import TurnContext

# A tool's result is shown up to this many characters (tool outputs can be whole web pages).
TOOL_RESULT_CHARS = 2000


@dataclass(frozen=True)
class PlanPart:
    """One part of the request: what it took, the share it draws on and what that share gives."""

    label: str
    share: str
    tokens: int
    given: int
    cut: bool


@dataclass(frozen=True)
class PackEntry:
    """An item the memory pack offered the prompt, with its score and the parts of it."""

    item_id: str
    content: str
    section: str
    score: float
    parts: dict[str, float]


@dataclass(frozen=True)
class ToolUse:
    name: str
    arguments: str
    result: str


@dataclass(frozen=True)
class TokenUse:
    model: str
    prompt: int
    completion: int
    cached: int


@dataclass(frozen=True)
class TurnTrace:
    """One answered turn, as the console shows it."""

    turn_id: str
    session_id: str
    at: datetime
    question: str
    reply: str
    model: str
    plan: tuple[PlanPart, ...]
    threshold_tokens: int
    packed: tuple[PackEntry, ...]
    # The best candidates left out for the budget: (item id, score, section).
    missed: tuple[tuple[str, float, str], ...]
    pack_summary: str
    graph: str
    tools: tuple[ToolUse, ...]
    tokens: tuple[TokenUse, ...]
    # From the message's arrival to the reply going out.
    reply_seconds: float = 0.0


class TurnTraces:
    """The last few turns of each chat (`console.turnsKept`), newest last."""

    def __init__(self, kept: Callable[[], int]) -> None:
        self._kept = kept
        self._by_chat: dict[str, deque[TurnTrace]] = {}

    def record(self, ctx: TurnContext, reply_seconds: float = 0.0) -> None:
        kept = max(self._kept(), 1)
        chat = self._by_chat.get(ctx.session.id)
        if chat is None or chat.maxlen != kept:
            chat = self._by_chat[ctx.session.id] = deque(chat or (), maxlen=kept)
        chat.append(trace_of(ctx, reply_seconds))

    def chats(self) -> list[str]:
        return sorted(self._by_chat)

    def of(self, session_id: str) -> list[TurnTrace]:
        return list(self._by_chat.get(session_id, ()))

    def all(self) -> list[TurnTrace]:
        """Every kept turn, oldest first."""
        return sorted((trace for chat in self._by_chat.values() for trace in chat), key=lambda trace: trace.at)

    def find(self, turn_id: str) -> TurnTrace | None:
        for chat in self._by_chat.values():
            for trace in chat:
                if trace.turn_id == turn_id:
                    return trace
        return None


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

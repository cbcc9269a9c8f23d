"""What the console's "why this reply" page shows of one answered turn (`TurnTrace`), where the traces are
kept (`TraceStore`: the workspace's files, `bot.pipeline.trace_files`, or PostgreSQL,
`bot.pipeline.trace_table`), a forgotten item's text blanked out of them (`redacted`), and a trace as one
JSON object and back. Nothing here imports the pipeline: the stores are opened by commands that build no bot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from bot.domain.memory import MemoryItem

# What a forgotten item's text is shown as, in the items packed and wherever a tool's result or the
# graph's snippets quoted it.
FORGOTTEN_TEXT = "(forgotten)"
# A forgotten text shorter than this is not looked for in tool results and graph snippets: a word or two
# would blank out unrelated text that happens to hold them.
FORGOTTEN_QUOTE_MIN_CHARS = 12


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
    """An item the memory pack offered the prompt, with its score and the parts of it; an item forgotten
    since keeps its id and score, its text blanked (`forgotten`)."""

    item_id: str
    content: str
    section: str
    score: float
    parts: dict[str, float]
    forgotten: bool = False


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


class TraceStore(Protocol):
    """Where the recent traces are kept. Each chat keeps the newest `kept` turns it was given; a read gives
    at most `kept` a chat, in the order they were given. A failed write or read raises `OSError`."""

    async def add(self, trace: TurnTrace, kept: int) -> None: ...

    async def chats(self) -> list[str]:
        """The session ids with a trace kept, sorted."""
        ...

    async def of(self, session_id: str, kept: int) -> list[TurnTrace]: ...

    async def recent(self, limit: int) -> list[TurnTrace]:
        """The newest `limit` traces of every chat, the newest last."""
        ...

    async def forget(self, items: list[MemoryItem]) -> int:
        """Blank the text of `items` out of every trace (`redacted`); how many traces changed."""
        ...


# -- forgetting --------------------------------------------------------------------------------------


def redacted(trace: TurnTrace, items: list[MemoryItem]) -> TurnTrace | None:
    """`trace` without the text of `items`, or None when it shows none of it: an item packed keeps its
    id, section and score, its text blanked; a tool's result or the graph's snippets that quote an item
    show `FORGOTTEN_TEXT` there. The question and the reply stay: they are the conversation, which the
    chat's session keeps too."""
    ids = {item.id for item in items}
    quotes = [item.content for item in items if len(item.content) >= FORGOTTEN_QUOTE_MIN_CHARS]

    def unquoted(text: str) -> str:
        for quote in quotes:
            text = text.replace(quote, FORGOTTEN_TEXT)
        return text

    changed = replace(
        trace,
        packed=tuple(
            replace(entry, content="", forgotten=True) if entry.item_id in ids else entry for entry in trace.packed
        ),
        graph=unquoted(trace.graph),
        tools=tuple(replace(tool, result=unquoted(tool.result)) for tool in trace.tools),
    )
    return None if changed == trace else changed


# -- (de)serialising: one JSON object a trace -------------------------------------------------------


def trace_to_json(trace: TurnTrace) -> dict[str, Any]:
    """The trace as a JSON object (`trace_from_json` reads it back equal)."""
    return {
        "turnId": trace.turn_id,
        "sessionId": trace.session_id,
        "at": trace.at.isoformat(),
        "question": trace.question,
        "reply": trace.reply,
        "model": trace.model,
        "plan": [
            {"label": p.label, "share": p.share, "tokens": p.tokens, "given": p.given, "cut": p.cut} for p in trace.plan
        ],
        "thresholdTokens": trace.threshold_tokens,
        "packed": [
            {
                "itemId": e.item_id,
                "content": e.content,
                "section": e.section,
                "score": e.score,
                "parts": e.parts,
                "forgotten": e.forgotten,
            }
            for e in trace.packed
        ],
        "missed": [[item_id, score, section] for item_id, score, section in trace.missed],
        "packSummary": trace.pack_summary,
        "graph": trace.graph,
        "tools": [{"name": t.name, "arguments": t.arguments, "result": t.result} for t in trace.tools],
        "tokens": [
            {"model": u.model, "prompt": u.prompt, "completion": u.completion, "cached": u.cached} for u in trace.tokens
        ],
        "replySeconds": trace.reply_seconds,
    }


def trace_from_json(record: dict[str, Any]) -> TurnTrace:
    """The trace a JSON object holds; `KeyError`, `TypeError` or `ValueError` when it is not one."""
    at = datetime.fromisoformat(_text(record["at"]))
    return TurnTrace(
        turn_id=_text(record["turnId"]),
        session_id=_text(record["sessionId"]),
        at=at,
        question=_text(record["question"]),
        reply=_text(record["reply"]),
        model=_text(record["model"]),
        plan=tuple(
            PlanPart(_text(p["label"]), _text(p["share"]), _int(p["tokens"]), _int(p["given"]), _flag(p["cut"]))
            for p in _list(record["plan"])
        ),
        threshold_tokens=_int(record["thresholdTokens"]),
        packed=tuple(
            PackEntry(
                _text(e["itemId"]),
                _text(e["content"]),
                _text(e["section"]),
                _number(e["score"]),
                {_text(name): _number(value) for name, value in _object(e["parts"]).items()},
                _flag(e["forgotten"]),
            )
            for e in _list(record["packed"])
        ),
        missed=tuple(_missed(entry) for entry in _list(record["missed"])),
        pack_summary=_text(record["packSummary"]),
        graph=_text(record["graph"]),
        tools=tuple(
            ToolUse(_text(t["name"]), _text(t["arguments"]), _text(t["result"])) for t in _list(record["tools"])
        ),
        tokens=tuple(
            TokenUse(_text(u["model"]), _int(u["prompt"]), _int(u["completion"]), _int(u["cached"]))
            for u in _list(record["tokens"])
        ),
        reply_seconds=_number(record["replySeconds"]),
    )


def _missed(entry: Any) -> tuple[str, float, str]:
    item_id, score, section = _list(entry)
    return _text(item_id), _number(score), _text(section)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{value!r} is not true or false")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{value!r} is not an object")
    return value

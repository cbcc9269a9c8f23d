"""The memory tools the model may call: structured items and MEMORY.md, for the calling chat's scope.

`memory_search`, `memory_add`, `memory_update`, `memory_promote`, `memory_forget` work on the
structured items; `read_memory`, `write_memory` (append) and `update_memory` (find and replace) on
MEMORY.md. Every tool acts on the memory of the chat it was called from and on nothing else: in a
chat that does not see the owner's memory, `read_memory` adds only what the owner shared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.extraction import MemoryCandidate
from bot.memory.service import MemoryService
from bot.memory.write_service import MemoryWriteService, UnknownMemoryItem, WriteReport
from bot.settings import RuntimeConfig
from bot.tools.registry import Tool, ToolContext, ToolError

SEARCH_LIMIT_MAX = 30
EXPLICIT_SALIENCE = 0.8
MEMORY_MD_LIMIT_CHARS = 20_000
# Bounds on what the model sends: a query is a sentence, an id a dozen characters.
QUERY_MAX_CHARS = 2000
ID_MAX_CHARS = 64
# Heads what the owner shared, after the chat's own MEMORY.md, in what `read_memory` returns.
SHARED_NOTE = "[Shared by the owner with every chat; not part of this MEMORY.md]"


def describe_item(item: MemoryItem, score: float | None = None) -> str:
    """One line per item, as the tools and `/memory` list them."""
    pin = (" 📌" if item.pinned else "") + (" · shared" if item.shared else "")
    relevance = f" ({score:.2f})" if score else ""
    content = item.content.replace("\n", " ")
    return (
        f"{item.id} · {item.layer.value.lower()}/{item.type} · conf {item.confidence:.2f} · "
        f"{item.created_at:%Y-%m-%d}{pin}{relevance}\n  {content}"
    )


class MemorySearchArgs(BaseModel):
    query: str = Field(max_length=QUERY_MAX_CHARS, description="empty: newest items")
    limit: int = Field(8, ge=1, le=SEARCH_LIMIT_MAX)


class MemoryAddArgs(BaseModel):
    content: str = Field(min_length=3, max_length=2000)
    layer: Literal["SEMANTIC", "PROCEDURAL", "EPISODIC"] = "SEMANTIC"
    type: str = Field("fact", max_length=30, description="fact, preference, constraint, decision, fix...")
    key: str | None = Field(None, max_length=60, description="slot, e.g. 'home city': a newer fact replaces the older")
    confidence: float = Field(0.9, ge=0, le=1)


class MemoryUpdateArgs(BaseModel):
    id: str = Field(max_length=ID_MAX_CHARS)
    content: str = Field(min_length=3, max_length=2000)


class MemoryIdArgs(BaseModel):
    id: str = Field(max_length=ID_MAX_CHARS)


class MemoryForgetArgs(BaseModel):
    id: str | None = Field(None, max_length=ID_MAX_CHARS)
    query: str | None = Field(None, max_length=QUERY_MAX_CHARS, description="instead of id: words of the item")

    @model_validator(mode="after")
    def _one_of(self) -> MemoryForgetArgs:
        if not self.id and not (self.query or "").strip():
            raise ValueError("give the id or the query of the item to forget")
        return self


class NoArgs(BaseModel):
    pass


class WriteMemoryArgs(BaseModel):
    content: str = Field(min_length=1, max_length=MEMORY_MD_LIMIT_CHARS)


class UpdateMemoryArgs(BaseModel):
    old_text: str = Field(min_length=1, max_length=MEMORY_MD_LIMIT_CHARS)
    new_text: str = Field(max_length=MEMORY_MD_LIMIT_CHARS, description="empty deletes old_text")


def _report_text(report: WriteReport) -> str:
    if report.added:
        added = report.added[0]
        lines = [f"Remembered as {added.id} ({added.layer.value.lower()})."]
    else:
        known = report.reinforced[0]
        lines = [f"Already known as {known.id}; confidence now {known.confidence:.2f}."]
    lines += [f"Replaced older {item.id}: {item.content}" for item in report.superseded]
    lines += [f"Promoted {item.id} to semantic memory." for item in report.promoted]
    return "\n".join(lines)


class MemoryTools:
    """The tool handlers, bound to the memory service."""

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    async def memory_search(self, args: MemorySearchArgs, ctx: ToolContext) -> str:
        found = await self._memory.search(ctx.config.memory, ctx.session_id, args.query, args.limit, shared=True)
        if not found:
            return "No memory items match."
        return "\n".join(describe_item(item, score) for item, score in found)

    async def memory_add(self, args: MemoryAddArgs, ctx: ToolContext) -> str:
        config = ctx.config.memory
        candidate = MemoryCandidate(
            layer=MemoryLayer(args.layer),
            type=args.type,
            content=args.content.strip(),
            confidence=args.confidence,
            salience=EXPLICIT_SALIENCE,
            key=args.key.strip().lower() if args.key else None,
        )
        now = self._memory.now()
        report = await self._memory.change(
            config, ctx.session_id, lambda writer: writer.add(candidate, ctx.session_id, now, config)
        )
        return _report_text(report)

    async def memory_update(self, args: MemoryUpdateArgs, ctx: ToolContext) -> str:
        now = self._memory.now()
        newer = await self._edit(ctx, lambda writer: writer.update(args.id, args.content, now))
        return f"Updated: {args.id} is kept as history, the current version is {newer.id}."

    async def memory_promote(self, args: MemoryIdArgs, ctx: ToolContext) -> str:
        now = self._memory.now()
        item = await self._edit(ctx, lambda writer: writer.promote(args.id, now))
        return f"{item.id} is in {item.layer.value.lower()} memory."

    async def memory_forget(self, args: MemoryForgetArgs, ctx: ToolContext) -> str:
        item_id = args.id
        others: list[MemoryItem] = []
        if not item_id:
            found = await self._memory.search(ctx.config.memory, ctx.session_id, args.query or "", 4)
            if not found:
                return "Nothing in memory matches; nothing was forgotten."
            item_id = found[0][0].id
            others = [item for item, _ in found[1:]]
        try:
            item = await self._memory.forget(ctx.config.memory, ctx.session_id, item_id)
        except UnknownMemoryItem as error:
            raise ToolError(f"no memory item has the id {error.args[0]!r}; memory_search shows the ids") from error
        text = f"Forgotten {item.id}: {item.content}"
        if others:
            text += "\nOther items that also matched (forget them by id if meant):\n"
            text += "\n".join(describe_item(other) for other in others)
        return text

    async def read_memory(self, args: NoArgs, ctx: ToolContext) -> str:
        content = await (await self._memory.long_term(ctx.config.memory, ctx.session_id)).for_model()
        shared = await self._memory.shared_by_owner(ctx.config.memory, ctx.session_id)
        if shared:
            content = f"{content.rstrip()}\n\n{SHARED_NOTE}\n{shared}".lstrip()
        return content or "(MEMORY.md is empty)"

    async def write_memory(self, args: WriteMemoryArgs, ctx: ToolContext) -> str:
        long_term = await self._memory.long_term(ctx.config.memory, ctx.session_id)
        await long_term.append(args.content)
        return f"Appended {len(args.content)} characters to MEMORY.md."

    async def update_memory(self, args: UpdateMemoryArgs, ctx: ToolContext) -> str:
        long_term = await self._memory.long_term(ctx.config.memory, ctx.session_id)
        if not await long_term.replace(args.old_text, args.new_text):
            raise ToolError("old_text is not in MEMORY.md; read_memory shows its exact content")
        return "MEMORY.md updated."

    async def _edit(self, ctx: ToolContext, edit: Callable[[MemoryWriteService], MemoryItem]) -> MemoryItem:
        try:
            return await self._memory.change(ctx.config.memory, ctx.session_id, edit)
        except UnknownMemoryItem as error:
            raise ToolError(f"no memory item has the id {error.args[0]!r}; memory_search shows the ids") from error


def memory_tools(memory: MemoryService) -> list[Tool[Any]]:
    handlers = MemoryTools(memory)
    return [
        Tool("memory_search", "Search structured memory; shows item ids.", MemorySearchArgs, handlers.memory_search),
        Tool("memory_add", "Remember a durable fact, preference or procedure.", MemoryAddArgs, handlers.memory_add),
        Tool("memory_update", "Correct a memory item (old kept as history).", MemoryUpdateArgs, handlers.memory_update),
        Tool("memory_promote", "Make an episodic item lasting.", MemoryIdArgs, handlers.memory_promote),
        Tool("memory_forget", "Forget a memory item by id or query.", MemoryForgetArgs, handlers.memory_forget),
        Tool("read_memory", "Read MEMORY.md.", NoArgs, handlers.read_memory),
        Tool("write_memory", "Append Markdown to MEMORY.md.", WriteMemoryArgs, handlers.write_memory),
        Tool("update_memory", "Find and replace in MEMORY.md.", UpdateMemoryArgs, handlers.update_memory),
    ]  # fmt: skip


class MemoryToolSource:
    """The memory tools, offered while `memory.enabled` is true (switching it applies live)."""

    def __init__(self, memory: MemoryService, config: Callable[[], RuntimeConfig]) -> None:
        self._tools = memory_tools(memory)
        self._config = config

    def tools(self) -> Sequence[Tool[Any]]:
        return self._tools if self._config().memory.enabled else []

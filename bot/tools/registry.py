"""`ToolRegistry`: the tools the model may call, their JSON schemas, and validated execution.

Built-in tools are registered once; tool sources (MCP servers, the web tools, skills) are asked for
their tools on every model call, so a server added or a switch turned off in the config applies to
the next call. Every result is scrubbed of the environment's secrets before the model sees it, and
every call is logged with the turn it belongs to.

A built-in tool declares its arguments as a pydantic model; a source's tool may bring a JSON schema
of its own (an MCP server's), checked by whoever runs it. Arguments that are not JSON or do not validate
never reach the tool: the model gets an error result that says what was wrong, so it can try again.
A tool that raises gives an error result too; the run goes on. Whatever the model sends (megabytes of
argument, JSON nested too deeply to read, a name that is no tool), the result is a short error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from bot.domain.message import ToolCall
from bot.logging_setup import redact
from bot.metrics import BotMetrics
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

Args = TypeVar("Args", bound=BaseModel)

# An error result is a sentence or two; one that echoes a huge argument is cut to this.
MAX_ERROR_CHARS = 2000
# A failure's reason is logged at most this long.
MAX_LOGGED_ERROR_CHARS = 300
# A tool name from the model is shown (in an error, a log line) at most this long.
MAX_NAME_CHARS = 100


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


@dataclass(frozen=True)
class ToolContext:
    """Who a call is for: tools act for this chat and nothing else."""

    session_id: str
    channel_type: str
    chat_id: str
    config: RuntimeConfig
    # The id of the user message the turn answers: every log line of the call carries it.
    turn_id: str = ""


class ToolError(Exception):
    """A tool refusing or failing in a way the model should be told about, in plain words."""


@dataclass(frozen=True)
class Tool(Generic[Args]):
    """A function the model can call: name, what it is for, argument model, and the handler."""

    name: str
    description: str
    arguments: type[Args]
    handler: Callable[[Args, ToolContext], Awaitable[str]]

    def schema(self) -> dict[str, Any]:
        parameters = self.arguments.model_json_schema()
        parameters.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


@dataclass(frozen=True)
class ExternalTool:
    """A tool whose arguments are described by a JSON schema of its own (an MCP server's tool).

    The handler gets the arguments as the JSON object the model sent; checking them is its job.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[dict[str, Any], ToolContext], Awaitable[str]]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


AnyTool = Tool[Any] | ExternalTool


class ToolSource(Protocol):
    """Tools that come and go while the bot runs: asked for the current list on every model call."""

    def tools(self) -> Sequence[AnyTool]: ...


@runtime_checkable
class StartingToolSource(ToolSource, Protocol):
    """A source whose tools take a while to appear (servers starting): a turn waits, bounded, for them."""

    async def wait_until_started(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class ToolOutcome:
    """What a call produced: the text the model sees, and whether it failed."""

    content: str
    is_error: bool
    duration_ms: float


class ToolRegistry:
    """All tools available to the model, by name."""

    def __init__(self, metrics: BotMetrics | None = None, secrets: Callable[[], Iterable[str]] | None = None) -> None:
        self._metrics = metrics or BotMetrics()
        self._secrets = secrets or (lambda: ())
        self._tools: dict[str, Tool[Any]] = {}
        # Built once: generating JSON schemas is costly and they are sent with every model call.
        self._schemas: list[dict[str, Any]] = []
        self._sources: list[ToolSource] = []
        self._source_schemas: dict[int, tuple[AnyTool, dict[str, Any]]] = {}
        # The list last handed out: the same object while the offered tools stay the same, so the client
        # and the estimator keep their JSON of it (checked by identity) instead of encoding it each call.
        self._offered: list[dict[str, Any]] = []

    def register(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        self._schemas.append(tool.schema())

    def add_source(self, source: ToolSource) -> None:
        """Offer `source`'s tools from now on (a name that a built-in tool has is left out)."""
        self._sources.append(source)

    async def wait_for_sources(self, seconds: float) -> None:
        """Wait, at most `seconds`, for the sources whose tools are still starting (before a turn)."""
        starting = [source for source in self._sources if isinstance(source, StartingToolSource)]
        if starting:
            await asyncio.gather(*(source.wait_until_started(seconds) for source in starting))

    def names(self) -> list[str]:
        return list(self._tools) + [tool.name for tool in self._source_tools()]

    def schemas(self) -> list[dict[str, Any]]:
        """The schemas of every tool offered now; the same list as last time unless one changed."""
        tools = self._source_tools()
        # Kept only for the tools offered now, so a source that renews its tools does not grow the cache.
        self._source_schemas = {id(tool): (tool, self._schema_of(tool)) for tool in tools}
        offered = self._schemas + [self._source_schemas[id(tool)][1] for tool in tools]
        if len(offered) != len(self._offered) or any(a is not b for a, b in zip(offered, self._offered, strict=True)):
            self._offered = offered
        return self._offered

    def _source_tools(self) -> list[AnyTool]:
        offered: list[AnyTool] = []
        seen = set(self._tools)
        for source in self._sources:
            for tool in source.tools():
                if tool.name not in seen:
                    seen.add(tool.name)
                    offered.append(tool)
        return offered

    def _schema_of(self, tool: AnyTool) -> dict[str, Any]:
        cached = self._source_schemas.get(id(tool))
        if cached is None or cached[0] is not tool:
            cached = (tool, tool.schema())
            self._source_schemas[id(tool)] = cached
        return cached[1]

    def _find(self, name: str) -> AnyTool | None:
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        return next((tool for tool in self._source_tools() if tool.name == name), None)

    async def execute(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        started = time.monotonic()
        known = self._find(call.name) is not None
        log.debug("[ToolLoop] turn %s: calling %s", context.turn_id, call.name if known else "an unknown tool")
        content, is_error = await self._run(call, context)
        # A result may quote the environment (a page echoing a header, a server printing its env): never a secret.
        content = redact(content, self._secrets())
        outcome = ToolOutcome(content, is_error, (time.monotonic() - started) * 1000)
        self._metrics.tool_calls.labels(call.name if known else "unknown", "error" if is_error else "ok").inc()
        # A failure's reason is logged too (scrubbed, its first line): the model read it, the operator may need it.
        reason = ""
        if is_error:
            reason = ": " + clip(content.removeprefix("Error: ").split("\n", 1)[0], MAX_LOGGED_ERROR_CHARS)
        log.info(
            "[ToolLoop] turn %s: %s %s in %.0f ms, %d chars%s",
            context.turn_id, call.name if known else clip(repr(call.name), MAX_NAME_CHARS),
            "failed" if is_error else "ran", outcome.duration_ms, len(content), reason,
        )  # fmt: skip
        return outcome

    async def _run(self, call: ToolCall, context: ToolContext) -> tuple[str, bool]:
        tool = self._find(call.name)
        if tool is None:
            name = clip(repr(call.name), MAX_NAME_CHARS)
            return f"Error: there is no tool named {name}. Available: {', '.join(self.names())}.", True
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            return f"Error: the arguments are not valid JSON ({error.msg} at position {error.pos}).", True
        except RecursionError:
            return "Error: the arguments are nested too deeply to read; send flat JSON.", True
        if isinstance(tool, ExternalTool):
            if not isinstance(raw, dict):
                return f"Error: the arguments of {call.name} must be a JSON object.", True
            return await self._invoke(call.name, tool.handler(raw, context))
        try:
            arguments = tool.arguments.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'arguments'}: {item['msg']}" for item in error.errors()
            )
            return f"Error: invalid arguments for {call.name}: {problems}.", True
        return await self._invoke(call.name, tool.handler(arguments, context))

    async def _invoke(self, name: str, running: Awaitable[str]) -> tuple[str, bool]:
        try:
            return await running, False
        except ToolError as error:
            return clip(f"Error: {error}", MAX_ERROR_CHARS), True
        except Exception as error:
            log.exception("[ToolLoop] %s raised", name)
            return f"Error: {name} failed unexpectedly ({type(error).__name__}).", True

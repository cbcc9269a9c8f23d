"""`ToolRegistry`: the tools the model may call, their JSON schemas, and validated execution.

A tool declares its arguments as a pydantic model. Arguments that are not JSON or do not validate
never reach the tool: the model gets an error result that says what was wrong, so it can try again.
A tool that raises gives an error result too; the run goes on. Whatever the model sends (megabytes of
argument, JSON nested too deeply to read, a name that is no tool), the result is a short error.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from bot.domain.message import ToolCall
from bot.metrics import BotMetrics
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

Args = TypeVar("Args", bound=BaseModel)

# An error result is a sentence or two; one that echoes a huge argument is cut to this.
MAX_ERROR_CHARS = 2000
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
class ToolOutcome:
    """What a call produced: the text the model sees, and whether it failed."""

    content: str
    is_error: bool
    duration_ms: float


class ToolRegistry:
    """All tools available to the model, by name."""

    def __init__(self, metrics: BotMetrics | None = None) -> None:
        self._metrics = metrics or BotMetrics()
        self._tools: dict[str, Tool[Any]] = {}
        # Built once: generating JSON schemas is costly and they are sent with every model call.
        self._schemas: list[dict[str, Any]] = []

    def register(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        self._schemas.append(tool.schema())

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return list(self._schemas)

    async def execute(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        started = time.monotonic()
        content, is_error = await self._run(call, context)
        outcome = ToolOutcome(content, is_error, (time.monotonic() - started) * 1000)
        known = call.name in self._tools
        self._metrics.tool_calls.labels(call.name if known else "unknown", "error" if is_error else "ok").inc()
        log.info(
            "[ToolLoop] %s %s in %.0f ms, %d chars",
            call.name if known else clip(repr(call.name), MAX_NAME_CHARS), "failed" if is_error else "ran",
            outcome.duration_ms, len(content),
        )  # fmt: skip
        return outcome

    async def _run(self, call: ToolCall, context: ToolContext) -> tuple[str, bool]:
        tool = self._tools.get(call.name)
        if tool is None:
            name = clip(repr(call.name), MAX_NAME_CHARS)
            return f"Error: there is no tool named {name}. Available: {', '.join(self._tools)}.", True
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            return f"Error: the arguments are not valid JSON ({error.msg} at position {error.pos}).", True
        except RecursionError:
            return "Error: the arguments are nested too deeply to read; send flat JSON.", True
        try:
            arguments = tool.arguments.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'arguments'}: {item['msg']}" for item in error.errors()
            )
            return f"Error: invalid arguments for {call.name}: {problems}.", True
        try:
            return await tool.handler(arguments, context), False
        except ToolError as error:
            return clip(f"Error: {error}", MAX_ERROR_CHARS), True
        except Exception as error:
            log.exception("[ToolLoop] %s raised", call.name)
            return f"Error: {call.name} failed unexpectedly ({type(error).__name__}).", True

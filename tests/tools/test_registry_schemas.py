"""The registry hands out one list of schemas while the offered tools stay the same (the client and the
estimator keep its JSON by identity), and a new one as soon as a tool comes or goes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from bot.tools.registry import AnyTool, ExternalTool, Tool, ToolContext, ToolRegistry


class _NoArguments(BaseModel):
    pass


async def _answer(arguments: Any, context: ToolContext) -> str:
    return "ok"


class _Source:
    def __init__(self) -> None:
        self.offered: list[AnyTool] = []

    def tools(self) -> Sequence[AnyTool]:
        return self.offered


def _external(name: str) -> ExternalTool:
    return ExternalTool(name, f"{name} things", {"type": "object", "properties": {}}, _answer)


def _names(schemas: list[dict[str, Any]]) -> list[str]:
    return [schema["function"]["name"] for schema in schemas]


def test_the_same_list_while_nothing_changes() -> None:
    registry = ToolRegistry()
    registry.register(Tool("clock", "the time", _NoArguments, _answer))
    source = _Source()
    source.offered = [_external("search")]
    registry.add_source(source)

    first = registry.schemas()

    assert _names(first) == ["clock", "search"]
    assert registry.schemas() is first


def test_a_new_list_when_a_source_changes_its_tools() -> None:
    registry = ToolRegistry()
    source = _Source()
    registry.add_source(source)
    search = _external("search")
    source.offered = [search]
    first = registry.schemas()

    source.offered = [search, _external("fetch")]
    grown = registry.schemas()
    source.offered = [_external("search")]  # renewed: same name, a new tool object
    renewed = registry.schemas()
    source.offered = []
    emptied = registry.schemas()

    assert _names(first) == ["search"] and _names(grown) == ["search", "fetch"]
    assert grown is not first and renewed is not grown and _names(renewed) == ["search"]
    assert renewed is not first
    assert emptied == []
    assert first == [search.schema()]  # a list handed out earlier is never changed afterwards


def test_a_new_list_after_a_built_in_tool_is_registered() -> None:
    registry = ToolRegistry()
    registry.register(Tool("clock", "the time", _NoArguments, _answer))
    first = registry.schemas()

    registry.register(Tool("dice", "a roll", _NoArguments, _answer))

    assert _names(registry.schemas()) == ["clock", "dice"]
    assert _names(first) == ["clock"]

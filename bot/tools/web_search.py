"""`web_search`: results from the search provider the configuration names, over its HTTP API.

`searxng` is a self-hosted SearXNG instance (`web.searchUrl` is its root; its JSON output must be on
in its settings, `search.formats: [html, json]`); `brave` is the Brave Search API (key in
`BRAVE_API_KEY`); `tavily` is Tavily's (key in `TAVILY_API_KEY`). The provider's address is the
operator's choice, so it is not held to web_fetch's public-address rule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import BaseModel, Field

from bot.settings import WebConfig
from bot.tools.registry import Tool, ToolContext, ToolError

log = logging.getLogger(__name__)

BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
TAVILY_URL = "https://api.tavily.com/search"
# The environment variable that holds each hosted provider's key.
KEY_VARIABLES = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
MAX_SNIPPET_CHARS = 400


class WebSearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=400, description="What to search the web for")


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str


def missing_key(config: WebConfig, keys: Mapping[str, str]) -> str | None:
    """The environment variable the configured provider needs and does not have, if any."""
    variable = KEY_VARIABLES.get(config.search_provider or "")
    return variable if variable is not None and not keys.get(config.search_provider or "") else None


async def search(query: str, config: WebConfig, keys: Mapping[str, str]) -> list[SearchResult]:
    provider = config.search_provider
    timeout = aiohttp.ClientTimeout(total=config.search_timeout_seconds)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            if provider == "searxng":
                if not config.search_url:
                    raise ToolError("web.searchUrl (the SearXNG root) is not set")
                url = config.search_url.rstrip("/") + "/search"
                params = {"q": query, "format": "json"}
                async with session.get(url, params=params, headers={"Accept": "application/json"}) as response:
                    data = await _json(response, "SearXNG")
                return [_result(row, "content") for row in _rows(data, "results")[: config.search_max_results]]
            if provider == "brave":
                headers = {"Accept": "application/json", "X-Subscription-Token": keys.get("brave", "")}
                params = {"q": query, "count": str(config.search_max_results)}
                async with session.get(config.search_url or BRAVE_URL, params=params, headers=headers) as response:
                    data = await _json(response, "Brave Search")
                rows = _rows(data, "web", "results")
                return [_result(row, "description") for row in rows[: config.search_max_results]]
            if provider == "tavily":
                headers = {"Authorization": f"Bearer {keys.get('tavily', '')}"}
                body = {"query": query, "max_results": config.search_max_results}
                async with session.post(config.search_url or TAVILY_URL, json=body, headers=headers) as response:
                    data = await _json(response, "Tavily")
                return [_result(row, "content") for row in _rows(data, "results")[: config.search_max_results]]
    except TimeoutError as error:
        raise ToolError(f"the search provider did not answer within {config.search_timeout_seconds:.0f} s") from error
    except aiohttp.ClientError as error:
        raise ToolError(f"the search provider could not be reached: {type(error).__name__}: {error}") from error
    raise ToolError("web search is off: no web.searchProvider is configured")


async def _json(response: aiohttp.ClientResponse, provider: str) -> dict[str, Any]:
    if response.status >= 400:
        # SearXNG refuses a format its settings leave out with 403, the one slip of its setup.
        hint = " (is json among its search.formats?)" if provider == "SearXNG" and response.status == 403 else ""
        raise ToolError(f"{provider} answered HTTP {response.status}{hint}")
    try:
        data = await response.json(content_type=None)
    except ValueError as error:
        raise ToolError(f"{provider} sent something that is not JSON") from error
    if not isinstance(data, dict):
        raise ToolError(f"{provider} sent an unexpected answer")
    return data


def _rows(data: dict[str, Any], *path: str) -> list[Any]:
    """The list of results at `path` in a provider's answer; none when the answer has another shape."""
    node: Any = data
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, list) else []


def _result(row: Any, snippet_key: str) -> SearchResult:
    if not isinstance(row, dict):
        return SearchResult("", "", "")
    snippet = str(row.get(snippet_key) or "").strip()
    return SearchResult(str(row.get("title") or "").strip(), str(row.get("url") or ""), snippet[:MAX_SNIPPET_CHARS])


def render(query: str, results: list[SearchResult]) -> str:
    if not results:
        return f"No results for {query!r}."
    lines = [f"Results for {query!r}:"]
    for number, result in enumerate((r for r in results if r.url), start=1):
        lines.append(f"{number}. {result.title or result.url}\n   {result.url}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    return "\n".join(lines)


def web_search_tool(keys: Mapping[str, str]) -> Tool[WebSearchArgs]:
    async def web_search(args: WebSearchArgs, context: ToolContext) -> str:
        config = context.config.web
        results = await search(args.query, config, keys)
        log.info(
            "[ToolLoop] turn %s: web_search via %s: %d results",
            context.turn_id, config.search_provider, len(results),
        )  # fmt: skip
        return render(args.query, results)

    return Tool(
        "web_search",
        "Search the web. Returns titles, URLs and snippets; read a page with web_fetch.",
        WebSearchArgs,
        web_search,
    )

"""The web tools as the configuration has them now: `web_fetch` unless `web.fetchEnabled` is off,
`web_search` while `web.searchProvider` names a provider (and its key is in the environment)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from bot.settings import RuntimeConfig
from bot.tools.registry import AnyTool
from bot.tools.web_fetch import web_fetch_tool
from bot.tools.web_search import missing_key, web_search_tool

log = logging.getLogger(__name__)


class WebTools:
    """A tool source: asked on every model call, so switching a tool off in the config applies at once."""

    def __init__(self, config: Callable[[], RuntimeConfig], search_keys: Mapping[str, str]) -> None:
        self._config = config
        self._keys = search_keys
        self._fetch = web_fetch_tool()
        self._search = web_search_tool(search_keys)
        self._warned: str | None = None

    def tools(self) -> Sequence[AnyTool]:
        web = self._config().web
        offered: list[AnyTool] = [self._fetch] if web.fetch_enabled else []
        if web.search_provider is not None:
            missing = missing_key(web, self._keys)
            if missing is None:
                offered.append(self._search)
            elif self._warned != missing:
                self._warned = missing
                log.warning("[ToolLoop] web_search is off: web.searchProvider is %s but %s is not set",
                            web.search_provider, missing)  # fmt: skip
        return offered

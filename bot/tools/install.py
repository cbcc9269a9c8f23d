"""What the tools package gives the rest of the bot: the tool registry (workspace files, web, MCP servers)
that the memory, RAG, history, skill and reminder tools then register into."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.logging_setup import secrets_in_environment
from bot.metrics import BotMetrics
from bot.settings import EnvSettings, RuntimeConfig
from bot.tools.mcp import McpManager
from bot.tools.registry import ToolRegistry
from bot.tools.web import WebTools
from bot.tools.workspace_files import register_workspace_file_tools


@dataclass(frozen=True)
class InstalledTools:
    """The registry every package adds its tools to, and the MCP servers it offers the tools of."""

    registry: ToolRegistry
    mcp: McpManager


def install(
    env: EnvSettings, workspace_root: Path, config: Callable[[], RuntimeConfig], metrics: BotMetrics
) -> InstalledTools:
    mcp = McpManager(config)
    # Tool results never carry a secret: the bot's, any variable of the environment named like one (a page or
    # a server could echo it), nor what an MCP server's config took from the environment.
    registry = ToolRegistry(metrics, lambda: [*env.secrets(), *secrets_in_environment(os.environ), *mcp.secrets()])
    register_workspace_file_tools(registry, workspace_root)
    search_keys = {
        name: key.get_secret_value()
        for name, key in (("brave", env.brave_api_key), ("tavily", env.tavily_api_key))
        if key is not None
    }
    registry.add_source(WebTools(config, search_keys))
    registry.add_source(mcp)
    return InstalledTools(registry, mcp)

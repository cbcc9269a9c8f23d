"""What the console package gives the bot: the `/console` command, and (where the HTTP listener runs)
the console's pages on it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bot.access.policy import is_owner_chat
from bot.commands.registry import Command, CommandHandler, CommandRegistry, CommandRequest
from bot.console.auth import ConsoleAuth, LoginsInMemory, Viewer
from bot.console.graph_page import GraphPage
from bot.console.health_page import HealthPage
from bot.console.html import PREFIX
from bot.console.logins_db import LoginsInDatabase
from bot.console.memory_page import MemoryPages
from bot.console.server import ConsoleServer
from bot.console.settings_page import SettingsPage
from bot.console.why_page import WhyPage
from bot.context.planner import ContextPlanner
from bot.database.connection import Database, DatabaseError
from bot.http.listener import HttpListener
from bot.memory.paths import person_memory_key
from bot.memory.service import MemoryService
from bot.metrics import BotMetrics
from bot.pipeline.traces import TurnTraces
from bot.rag.service import RagService
from bot.runtime_config import RuntimeConfigStore
from bot.tools.mcp import McpManager

log = logging.getLogger(__name__)

# Where the listener takes every address, the link names the machine itself.
ANY_ADDRESS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class InstalledConsole:
    auth: ConsoleAuth
    server: ConsoleServer | None


def install(
    commands: CommandRegistry,
    listener: HttpListener | None,
    config_store: RuntimeConfigStore,
    memory: MemoryService,
    rag: RagService,
    planner: ContextPlanner,
    traces: TurnTraces,
    metrics: BotMetrics,
    mcp: McpManager,
    queue_depths: Callable[[], dict[str, int]],
    database: Database | None,
) -> InstalledConsole:
    """The console's logins are kept in `database` where there is one (every replica sees them), in the
    process otherwise."""
    auth = ConsoleAuth(LoginsInMemory() if database is None else LoginsInDatabase(database))
    commands.register(
        Command("console", "a login link to the web console", _console_command(auth, listener, config_store))
    )
    if listener is None:
        return InstalledConsole(auth, None)
    server = ConsoleServer(auth, config_store)
    memory_pages = MemoryPages(memory, config_store, planner)
    graph = GraphPage(rag)
    settings = SettingsPage(config_store)
    server.install(
        listener,
        {
            "memory": (memory_pages.items, memory_pages.change, False),
            "long-term": (memory_pages.long_term, memory_pages.save_long_term, False),
            "notes": (memory_pages.notes, None, False),
            "why": (WhyPage(traces).show, None, False),
            "graph": (graph.show, None, True),
            "graph.json": (graph.data, None, True),
            "graph/search.json": (graph.search, None, True),
            "graph/forget": (None, graph.forget, True),
            "settings": (settings.show, settings.save, True),
            "health": (
                HealthPage(metrics, traces, mcp, queue_depths, None if database is None else database.process_id).show,
                None,
                True,
            ),
        },
    )
    return InstalledConsole(auth, server)


def _console_command(
    auth: ConsoleAuth, listener: HttpListener | None, config_store: RuntimeConfigStore
) -> CommandHandler:
    async def handle(request: CommandRequest) -> str:
        config = await config_store.current()
        if not config.console.enabled:
            return "The web console is switched off (console.enabled is false in runtime-config.json)."
        if listener is None:
            return (
                "The web console is served by the bot's HTTP listener, which is not running: set BOT_LISTEN_PORT "
                "(it listens on 127.0.0.1 unless BOT_LISTEN_HOST says otherwise) and restart the bot."
            )
        inbound = request.inbound
        if inbound.is_group:
            return "A console link is sent only in a private chat: write /console to me directly."
        person = person_memory_key(inbound.channel_type, inbound.user_id)
        owner = is_owner_chat(person, config.access.allowed_users)
        if not owner and config.memory.scope != "user":
            return "The web console is the owner's."
        try:
            token = await auth.issue_link(Viewer(person, owner), config.console.link_minutes)
        except DatabaseError as error:
            log.error("[Console] No login link for %s: the database does not answer (%s)", person, error)
            return "I could not make a console link: the database does not answer just now. Try /console again shortly."
        host = "127.0.0.1" if listener.host in ANY_ADDRESS else listener.host
        root = (config.console.public_url or f"http://{host}:{listener.port}").rstrip("/")
        minutes = f"{config.console.link_minutes:g}"
        whose = "" if owner else " (your own memory)"
        return (
            f"Your console{whose}: {root}{PREFIX}/login?token={token}\nThe link works once, within {minutes} minutes."
        )

    return handle

"""MCP servers' tools for the model, through the official `mcp` SDK.

The servers are those of `mcpServers` in runtime-config.json, in the format MCP clients share:
`{"name": {"command", "args", "env"}}` starts a process and talks to it over stdio,
`{"name": {"url", "headers"}}` talks streamable HTTP. Each server has a supervisor task that starts
it, lists its tools, pings it, and restarts it with a doubling backoff when it fails to start,
crashes or stops answering: one log line each time, never a stuck turn. Its tools are offered as
`{server}__{tool}`, filtered by the server's `allowTools` and `denyTools`; a call that fails, crashes
or runs past `mcp.callTimeoutSeconds` is a tool error for the model. `McpManager.sync` applies the
configuration as it is now: servers added, changed or removed start and stop while the bot runs, as soon
as the edit is read (`follow`, a listener of the configuration store). A message that comes while a server
just added or changed is still starting waits for it, at most `mcp.readyWaitSeconds`
(`wait_until_started`), so that its tools are offered to that very message.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import logging
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from bot.logging_setup import add_secrets
from bot.settings import McpConfig, McpServerConfig, RuntimeConfig
from bot.tools.registry import AnyTool, ExternalTool, ToolContext, ToolError, clip

if TYPE_CHECKING:  # the SDK (large in memory) is imported only when a server is configured
    from mcp import Client
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpTool

log = logging.getLogger(__name__)

# Model APIs take tool names of at most 64 characters from this set.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
# `${NAME}` in `env` and `headers` values: taken from the bot's environment.
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A server's tools are listed page by page; a server that never stops paging is cut here.
MAX_LIST_PAGES = 20
# How long a stopping server may take to close before its task is cancelled.
STOP_TIMEOUT_SECONDS = 10.0
# A stdio server's stderr: each line logged at most this long; the last lines kept to say why it failed.
MAX_STDERR_LINE_CHARS = 500
STDERR_KEPT_LINES = 3
# How long a failed server's last lines are waited for (its process is gone: they are in the pipe, and the
# reader thread needs its turn at the interpreter, which a loaded machine may give it late). Only a process
# that left a child of its own holding the pipe waits it out, before the restart's backoff.
LAST_WORDS_WAIT_SECONDS = 5.0


class McpState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class McpServerStatus:
    """What `/status` shows of one server."""

    name: str
    transport: str
    state: McpState
    tools: int
    offered: int
    restarts: int
    last_error: str | None


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: `{server}__{tool}`, in the characters model APIs accept."""
    return _NAME_UNSAFE.sub("_", f"{server}__{tool}")[:MAX_TOOL_NAME_CHARS]


def expand_environment(value: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """`value` with each `${NAME}` replaced from `environ`, and the values put in (secrets to scrub)."""
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        found = environ.get(match[1])
        if found is None:
            raise ValueError(f"${{{match[1]}}} is not set in the environment")
        used.append(found)
        return found

    return _ENV_REFERENCE.sub(replace, value), used


def is_offered(config: McpServerConfig, tool: str) -> bool:
    """Whether the server's allow and deny lists let the model see `tool`."""
    if config.allow_tools is not None and tool not in config.allow_tools:
        return False
    return tool not in config.deny_tools


def render_result(result: CallToolResult) -> str:
    """A tool result as the text the model reads."""
    from mcp_types import EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[image {block.mime_type}, {len(base64.b64decode(block.data, validate=False))} bytes]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[binary resource {resource.uri}]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{block.type} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def describe_error(error: BaseException) -> str:
    """One line for a failure, however the SDK or anyio wrapped it."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe_error(inner) for inner in error.exceptions)
    if isinstance(error, TimeoutError):
        return str(error) or "timed out"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class ServerOutput:
    """A stdio server's stderr, read by a thread of its own: each line goes to the log under the server's
    name (scrubbed of secrets like every log line, and never onto the terminal, whose screen may be the
    conversation's), and the last few are kept to say why the server failed."""

    def __init__(self, server: str) -> None:
        self._server = server
        read_end, write_end = os.pipe()
        # Handed to the server's process as its stderr; closed here once the connection is over.
        self.pipe = os.fdopen(write_end, "w")
        self.last: deque[str] = deque(maxlen=STDERR_KEPT_LINES)
        self._thread = threading.Thread(
            target=self._follow, args=(os.fdopen(read_end, "rb"),), name=f"mcp-{server}-stderr", daemon=True
        )
        self._thread.start()

    def _follow(self, lines: io.BufferedReader) -> None:
        with lines:
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    line = clip(line, MAX_STDERR_LINE_CHARS)
                    self.last.append(line)
                    log.info("[MCP] Server %s: %s", self._server, line)

    async def last_words(self) -> str | None:
        """The last line the server wrote, once what it wrote before it ended is read (a bounded wait)."""
        await asyncio.to_thread(self._thread.join, LAST_WORDS_WAIT_SECONDS)
        return self.last[-1] if self.last else None


class McpServer:
    """One configured server and the task that keeps it running."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        settings: Callable[[], McpConfig],
        environ: Mapping[str, str],
    ) -> None:
        self.name = name
        self.config = config
        self._settings = settings
        self._environ = environ
        self.state = McpState.STARTING
        self.restarts = 0
        self.last_error: str | None = None
        self.secrets: list[str] = []
        self._client: Client | None = None
        self._output: ServerOutput | None = None
        self._listing: list[McpTool] = []
        # Each tool offered, with its name on the server (what the allow and deny lists name).
        self._tools: list[tuple[ExternalTool, str]] = []
        self._stopping = asyncio.Event()
        self._check_now = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # When the running connection became ready; None while starting.
        self._ready_at: float | None = None
        # Set once the first start ended, ready or failed: what a message waits for.
        self.first_start_over = asyncio.Event()

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command is not None else "http"

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            log.warning("[MCP] Server %s did not stop within %.0f s; cancelled", self.name, STOP_TIMEOUT_SECONDS)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self.state = McpState.STOPPED
        self.first_start_over.set()

    def tools(self) -> list[ExternalTool]:
        """The tools offered now: the server's listing, less what its allow and deny lists keep out."""
        if self.state is not McpState.READY:
            return []
        return [tool for tool, listed in self._tools if is_offered(self.config, listed)]

    def status(self) -> McpServerStatus:
        return McpServerStatus(
            self.name, self.transport, self.state, len(self._listing), len(self.tools()), self.restarts, self.last_error
        )

    # -- the supervisor ---------------------------------------------------------------------------

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            self.state = McpState.STARTING
            self._ready_at = None
            try:
                await self._run_once()
            except Exception as error:  # every failure is one log line and a restart, never a crash of the bot
                self.last_error = describe_error(error)
                said = await self._output.last_words() if self._output is not None else None
                if said is not None:
                    self.last_error += f" (its last words: {said})"
            finally:
                self._client = None
                self._output = None
            up_since = self._ready_at
            self.first_start_over.set()
            if self._stopping.is_set():
                break
            settings = self._settings()
            if up_since is not None and time.monotonic() - up_since > settings.max_restart_backoff_seconds:
                failures = 0  # it ran well for a long time: this failure starts a new series
            delay = min(settings.restart_backoff_seconds * 2**failures, settings.max_restart_backoff_seconds)
            failures += 1
            self.state = McpState.FAILED
            log.warning(
                "[MCP] Server %s %s: %s; restarting in %.1f s",
                self.name, "failed" if up_since is not None else "failed to start", self.last_error, delay,
            )  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            self.restarts += 1
        self.state = McpState.STOPPED

    async def _run_once(self) -> None:
        """Start the server, list its tools and keep it checked until a stop (returns) or a failure (raises)."""
        settings = self._settings()
        # One scope around the whole connection (the SDK's task groups must nest inside it): its deadline
        # bounds the start, and is lifted once the server is ready.
        with anyio.CancelScope(deadline=anyio.current_time() + settings.start_timeout_seconds) as scope:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._client_for(stack))
                listing = await self._list_tools(client)
                scope.deadline = math.inf
                self._take(listing)
                self._client = client
                self.state = McpState.READY
                self.last_error = None
                self._ready_at = time.monotonic()
                self.first_start_over.set()
                log.info(
                    "[MCP] Server %s ready (%s): %d tools, %d offered",
                    self.name, self.transport, len(listing), len(self.tools()),
                )  # fmt: skip
                await self._watch(client)
        if scope.cancelled_caught and self._ready_at is None:
            raise TimeoutError(f"no answer within {settings.start_timeout_seconds:.0f} s")

    def _client_for(self, stack: AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        settings = self._settings()
        secrets: list[str] = []
        if self.config.command is not None:
            env: dict[str, str] = {}
            for key, value in self.config.env.items():
                env[key], used = expand_environment(value, self._environ)
                secrets += used
            args: list[str] = []
            for arg in self.config.args:
                expanded, used = expand_environment(arg, self._environ)
                args.append(expanded)
                secrets += used
            self.secrets = secrets
            add_secrets(secrets)
            parameters = StdioServerParameters(command=self.config.command, args=args, env=env, cwd=self.config.cwd)
            output = self._output = ServerOutput(self.name)
            stack.callback(output.pipe.close)
            return Client(
                stdio_client(parameters, errlog=output.pipe), read_timeout_seconds=settings.call_timeout_seconds
            )
        assert self.config.url is not None
        headers: dict[str, str] = {}
        for key, value in self.config.headers.items():
            headers[key], used = expand_environment(value, self._environ)
            secrets += used
        self.secrets = secrets
        add_secrets(secrets)
        http = create_mcp_http_client(
            headers=headers, timeout=httpx2.Timeout(settings.call_timeout_seconds, read=settings.call_timeout_seconds)
        )
        stack.push_async_callback(http.aclose)
        transport = streamable_http_client(self.config.url, http_client=http)
        return Client(transport, read_timeout_seconds=settings.call_timeout_seconds)

    async def _list_tools(self, client: Client, refresh: bool = False) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh" if refresh else "use")
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    async def _watch(self, client: Client) -> None:
        """Ping the server every `healthCheckSeconds` (or at once after a failed call) until a stop."""
        while not self._stopping.is_set():
            settings = self._settings()
            waits = [asyncio.create_task(self._stopping.wait()), asyncio.create_task(self._check_now.wait())]
            try:
                await asyncio.wait(waits, timeout=settings.health_check_seconds, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
            if self._stopping.is_set():
                return
            self._check_now.clear()
            # The tool listing doubles as the liveness check: ping is gone from the 2026 protocol, and a
            # server whose tools changed is seen to change.
            with anyio.fail_after(settings.health_check_timeout_seconds):
                listing = await self._list_tools(client, refresh=True)
            changed = [tool.name for tool in listing] != [tool.name for tool in self._listing]
            if changed:
                log.info("[MCP] Server %s now has %d tools", self.name, len(listing))
            self._take(listing, quiet=not changed)

    # -- tools ------------------------------------------------------------------------------------

    def _take(self, listing: list[McpTool], quiet: bool = False) -> None:
        """Offer `listing` from now on. Two tools whose names read the same to the model (`read.file` and
        `read_file`, or names past 64 characters alike at the start) cannot both be told apart: the first is
        offered, and the other is named in the log (unless `quiet`: the listing is the one already seen)."""
        tools: list[tuple[ExternalTool, str]] = []
        first: dict[str, str] = {}
        for tool in listing:
            offered = self._tool_for(tool)
            if offered.name in first:
                if not quiet:
                    log.warning(
                        "[MCP] Server %s: its tools %r and %r are both %s to the model; only %r is offered",
                        self.name, first[offered.name], tool.name, offered.name, first[offered.name],
                    )  # fmt: skip
                continue
            first[offered.name] = tool.name
            tools.append((offered, tool.name))
        self._listing, self._tools = listing, tools

    def _tool_for(self, listed: McpTool) -> ExternalTool:
        parameters = dict(listed.input_schema) if listed.input_schema else {}
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        description = clip(f"[MCP {self.name}] {listed.description or listed.name}", MAX_DESCRIPTION_CHARS)

        async def run(arguments: dict[str, Any], context: ToolContext) -> str:
            return await self.call(listed.name, arguments, context)

        return ExternalTool(tool_name(self.name, listed.name), description, parameters, run)

    async def call(self, tool: str, arguments: dict[str, Any], context: ToolContext) -> str:
        client = self._client
        if client is None or self.state is not McpState.READY:
            raise ToolError(f"the MCP server {self.name} is {self.state.value}; try again later")
        timeout = context.config.mcp.call_timeout_seconds
        try:
            result = await asyncio.wait_for(client.call_tool(tool, arguments, read_timeout_seconds=timeout), timeout)
        except Exception as error:
            reason = describe_error(error)
            log.warning("[MCP] turn %s: %s__%s failed: %s", context.turn_id, self.name, tool, reason)
            self._check_now.set()  # a crashed or hung server is found and restarted now, not at the next ping
            if isinstance(error, TimeoutError):
                raise ToolError(f"the MCP server {self.name} did not answer {tool} within {timeout:.0f} s") from error
            raise ToolError(f"the MCP server {self.name} failed on {tool}: {reason}") from error
        text = render_result(result)
        if result.is_error:
            raise ToolError(f"{self.name}__{tool}: {text or 'the tool reported an error'}")
        return text


class McpManager:
    """Every configured MCP server; a tool source for the registry and a section of `/status`."""

    def __init__(self, config: Callable[[], RuntimeConfig], environ: Mapping[str, str] | None = None) -> None:
        self._config = config
        self._environ = environ if environ is not None else os.environ
        self._servers: dict[str, McpServer] = {}
        self._lock = asyncio.Lock()
        self._synced: RuntimeConfig | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False

    async def sync(self, config: RuntimeConfig) -> None:
        """Start, restart or stop servers so that what runs is what `config` declares."""
        self._synced = config
        async with self._lock:
            if self._closed:
                return
            wanted = {
                name: server
                for name, server in config.mcp_servers.items()
                if config.mcp.enabled and not server.disabled
            }
            for name in list(self._servers):
                running = self._servers[name]
                if name not in wanted or not _same_process(running.config, wanted[name]):
                    del self._servers[name]
                    await running.stop()
                    log.info("[MCP] Server %s stopped (%s)", name, "removed" if name not in wanted else "changed")
            for name, server_config in wanted.items():
                if name in self._servers:
                    self._servers[name].config = server_config  # allow and deny lists apply as they are
                    continue
                server = McpServer(name, server_config, lambda: self._config().mcp, self._environ)
                self._servers[name] = server
                server.start()
                log.info("[MCP] Server %s starting (%s)", name, server.transport)

    def tools(self) -> Sequence[AnyTool]:
        if not self._config().mcp.enabled:
            return []
        return [tool for server in self._servers.values() for tool in server.tools()]

    def follow(self, config: RuntimeConfig) -> None:
        """Apply a configuration just read, in the background (the configuration store calls this on each edit)."""
        if config is self._synced or self._closed:
            return
        self._synced = config
        try:
            task = asyncio.get_running_loop().create_task(self.sync(config), name="mcp sync")
        except RuntimeError:
            return  # no loop (the command line): the start of a running bot syncs
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wait_until_started(self, seconds: float) -> None:
        """Wait, at most `seconds`, for an edit being applied and for the servers on their first start
        (just added or changed) to be ready or to fail; servers already up, or restarting, are not waited for."""
        if seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        syncing = [task for task in self._background if not task.done()]
        if syncing:
            await asyncio.wait(syncing, timeout=seconds)
        starting = [s.first_start_over for s in self._servers.values() if not s.first_start_over.is_set()]
        remaining = deadline - loop.time()
        if not starting or remaining <= 0:
            return
        waits = [asyncio.ensure_future(event.wait()) for event in starting]
        started = loop.time()
        try:
            await asyncio.wait(waits, timeout=remaining)
        finally:
            for waiting in waits:
                waiting.cancel()
        log.info("[MCP] Waited %.1f s for %d servers starting", loop.time() - started, len(waits))

    def statuses(self) -> list[McpServerStatus]:
        return [server.status() for server in self._servers.values()]

    def secrets(self) -> list[str]:
        """Values the servers' `env` and `headers` took from the environment: scrubbed from every result."""
        return [secret for server in self._servers.values() for secret in server.secrets]

    async def close(self) -> None:
        self._closed = True
        async with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        await asyncio.gather(*(server.stop() for server in servers))
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _same_process(running: McpServerConfig, wanted: McpServerConfig) -> bool:
    """Whether a server can keep running under `wanted`: only its tool lists changed."""
    keep = {"allow_tools", "deny_tools"}
    return running.model_dump(exclude=keep) == wanted.model_dump(exclude=keep)

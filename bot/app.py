"""Wiring: the `Application`, which has each package install itself, and its lifespan (start, stop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.access.policy import AccessPolicy
from bot.channels import install as channels_install
from bot.channels.base import Channel, InboundHandler
from bot.chat_move_records import MoveTable, move_records
from bot.chat_moves import ChatMoves
from bot.clock import Clock, resolve_timezone
from bot.commands import install as commands_install
from bot.commands.model import ModelSwitch
from bot.commands.registry import CommandRegistry
from bot.compaction import install as compaction_install
from bot.console import install as console_install
from bot.context.estimator import TokenEstimator
from bot.context.planner import ContextPlanner
from bot.database.connection import DatabaseError
from bot.domain.inbound import InboundMessage
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.heap import settle_after_load
from bot.http.listener import HttpListener
from bot.ledger.postgres import LedgerTables
from bot.ledger.turns import Turn, TurnLedger
from bot.llm import install as llm_install
from bot.media import install as media_install
from bot.memory import install as memory_install
from bot.metrics import BotMetrics
from bot.notices import DeliverToOwner, OwnerNotices
from bot.pipeline import install as pipeline_install
from bot.rag import install as rag_install
from bot.runtime_config import RuntimeConfigStore
from bot.runtime_config_db import RuntimeConfigRow, read_row_at_start
from bot.scheduler import install as scheduler_install
from bot.scheduler.reminders import Deliver
from bot.sessions.service import SessionService
from bot.settings import EnvSettings
from bot.setup.checks import CONFIG_CHECK, local_checks
from bot.setup.workspace import prepare_workspace
from bot.shipped import shipped_path
from bot.skills import install as skills_install
from bot.storage.durability import DeferredSync
from bot.stores import choose_stores, shared_chat_lock
from bot.tools import install as tools_install
from bot.workspace import Workspace

log = logging.getLogger(__name__)

# SIGINT/SIGTERM must end the process within 10 s: runs in progress get SHUTDOWN_GRACE_SECONDS to finish,
# the whole stop STOP_DEADLINE_SECONDS; a stage still stopping then is left, and each stage after it still
# gets STAGE_STOP_MIN_SECONDS (closing a client or a file takes less).
SHUTDOWN_GRACE_SECONDS = 7.0
# How often a process sharing the database looks for turns and readings that a process gone (stopped, died) left.
ADOPT_EVERY_SECONDS = 2.0
STOP_DEADLINE_SECONDS = 9.0
STAGE_STOP_MIN_SECONDS = 0.1
DEFAULT_LISTEN_PORT = 8080
# The lock among the processes sharing the database that the one polling Telegram holds.
POLLER_LEASE = "telegram:poller"


@dataclass(frozen=True)
class Stage:
    """One step of the lifespan: `start` runs in the order of `Application.stages`, `stop` in the reverse."""

    name: str
    start: Callable[[], Awaitable[None]]
    stop: Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


def load_runtime_config(
    env: EnvSettings, workspace: Workspace, notices: OwnerNotices | None = None
) -> RuntimeConfigStore:
    """The runtime configuration: the shipped defaults, the workspace's file over them, `BOT_MODEL` over both;
    a key refused in the file is told to the owner through `notices`."""
    store = RuntimeConfigStore(
        shipped_path("config") / "runtime-config.json",
        workspace.runtime_config_file,
        {"llm": {"model": env.bot_model}} if env.bot_model else None,
        notices,
    )
    if env.bot_database_url is not None:
        url = env.bot_database_url.get_secret_value()
        store.use_database(read_row_at_start(url), _no_database_yet)
    store.load_now()
    return store


async def _no_database_yet(text: str) -> int:
    raise DatabaseError("the database is not open yet")


class Application:
    """The bot in one process: what each package installs, built once, and the lifespan that runs it.

    Construction prepares the workspace, reads the configuration and calls each package's `install`
    with only what that package needs, lower layers first (models, tools, memory and RAG, compaction,
    the pipeline and the commands, the router, the scheduler): each returns what it provides, kept here
    as attributes. Nothing runs yet. `start` runs `stages` in order: the model client, the stores (what
    the last run left unanswered), memory, the knowledge graph, MCP servers, the HTTP listener, the
    channels, the documents being read, the scheduler, and then the pipeline answers the backlog. `stop`
    runs each stage's stop in the reverse order, within a deadline, whether `start` ran, failed half way
    or never ran (what construction opened is released too).
    """

    def __init__(self, env: EnvSettings) -> None:
        self.env = env
        self.workspace = workspace = prepare_workspace(env)
        self.clock = clock = Clock(resolve_timezone(env.bot_timezone))
        # What the owner must be told without asking, from any layer; delivered once the channels run.
        self.notices = OwnerNotices(workspace.root / "state" / "owner-notices.json")
        self.config_store = config_store = load_runtime_config(env, workspace, self.notices)
        model_switch = ModelSwitch(config_store, workspace.root / "state" / "model.json", env.bot_model)
        model_switch.restore()  # before anything reads the model

        self.metrics = metrics = BotMetrics()
        # The writes a turn need not wait for (the archive can stand in for them) are fsync'd together, later.
        self.deferred_sync = deferred = DeferredSync()
        # Each concern's store: the workspace's files, or PostgreSQL with BOT_DATABASE_URL (opened at start).
        self.stores = stores = choose_stores(env, workspace, deferred)
        # Chats whose id changed (a Telegram group upgraded to a supergroup); with a database, a chat another
        # process moved is followed once its old id is asked for.
        moves = move_records(workspace, stores.database)
        where_moved = moves.where_moved if isinstance(moves, MoveTable) else None
        self.sessions = sessions = SessionService(stores.sessions, deferred, where_moved)
        # Received, answered, delivered: what the channels and the pipeline ask about every turn.
        self.ledger = ledger = TurnLedger(stores.ledger)
        # Each package adds its commands here; the order they are added in is the order /help and Telegram list.
        self.commands = commands = CommandRegistry()

        # What every layer uses: the model client, and the tool registry each package adds its tools to.
        estimator = TokenEstimator()  # the one estimator: the planner, memory, RAG and compaction count alike
        models = llm_install.install(
            env.openai_api_key, env.openai_base_url, shipped_path("config") / "models.json", workspace.models_file,
            metrics, workspace.root / "state" / "token-spending.json", lambda: clock.now().date(), estimator.ratio_for,
            workspace.root / "state" / "model-windows.json", self.notices.tell_once,
        )  # fmt: skip
        self.llm = llm = models.client
        self._embedders = models.embedders
        self.models = models.models
        tools = tools_install.install(env, workspace.root, config_store.in_force, metrics)
        self.tools, self.mcp = tools.registry, tools.mcp
        config_store.on_change(tools.mcp.follow)  # servers start, restart or stop as soon as an edit is read
        self.planner = planner = ContextPlanner(estimator, models.models, tools.registry.schemas)

        # Memory, RAG, compaction: siblings that know nothing of each other; what connects them is here.
        memory = memory_install.install(
            workspace, clock, llm, estimator, models.embedders, config_store, tools.registry, deferred, self.notices,
            stores.memory_documents, stores.memory_items,
        )  # fmt: skip
        rag = rag_install.install(
            env, workspace, clock, llm, estimator, models.embedders, config_store, tools.registry, models.models,
            stores.database,
        )  # fmt: skip
        memory.service.on_forget(lambda forgotten: rag.forget_messages(forgotten.message_ids))
        compaction = compaction_install.install(
            sessions, llm, models.models, planner, config_store, memory.pre_compaction, tools.registry
        )
        self.memory, self.rag, self.documents = memory.service, rag.service, rag.documents
        skills = skills_install.install(workspace, sessions, config_store.in_force, tools.registry)
        media = media_install.install(workspace.root, llm)

        # The pipeline, the commands (which run it again for /retry), the router (which routes to both).
        pipeline = pipeline_install.install(
            workspace=workspace, clock=clock, sessions=sessions, config_store=config_store, llm=llm, planner=planner,
            compaction=compaction, memory=memory.service, rag=rag.service, skills=skills.library, tools=tools.registry,
            media_store=media.store, vision=media.vision, ledger=ledger, metrics=metrics, trace_store=stores.traces,
        )  # fmt: skip
        self.runner = pipeline.runner
        # A memory item forgotten is no longer shown in the console's traces either.
        memory.service.on_forget(lambda forgotten: pipeline.traces.forget(forgotten.items))
        self.status = commands_install.install(
            commands, sessions=sessions, clock=clock, config_store=config_store, model_switch=model_switch,
            planner=planner, compaction=compaction, memory=memory.service, rag=rag.service, documents=rag.documents,
            mcp=tools.mcp, skills=skills.library, answer_again=self._answer_again,
            forget_exchange=pipeline.forget_exchange, spending=llm.spending,
            setup_problems=lambda: [
                check.line() for check in local_checks(env) if not check.ok and check.name != CONFIG_CHECK
            ],
        )  # fmt: skip
        access = AccessPolicy(config_store, stores.pairing)
        self.router = router = pipeline_install.install_router(
            pipeline, commands, access, rag.documents, media.intake, metrics
        )
        # Stored items' vectors are made while no message waits for its reply or is being answered.
        memory.service.follow_replies(lambda: sum(router.dispatcher.queue_depths().values()))
        scheduled = scheduler_install.install(
            reminder_store=stores.reminders, clock=clock,
            sessions=sessions, config_store=config_store, compaction=compaction, memory=memory.service,
            rag=rag.service, tools=tools.registry, commands=commands,
            chat_is_active=lambda session_id: session_id in router.dispatcher.queue_depths(),
        )  # fmt: skip
        self.scheduler, self.reminders = scheduled.scheduler, scheduled.reminders
        # A chat whose id changes (a Telegram group upgraded to a supergroup) takes what the bot keeps of it along.
        self.chat_moves = ChatMoves(
            workspace, sessions, memory.service, stores.reminders, rag.documents, moves, stores.database
        )
        if stores.database is not None and isinstance(stores.ledger, LedgerTables):
            # Processes sharing the database answer a chat one at a time, in the order its messages came.
            router.dispatcher.chat_lock = shared_chat_lock(
                stores.database, stores.ledger, sessions, self.chat_moves.arrival
            )
        self.channels: list[Channel] = []
        self.listener = self._listener()
        # The web console's pages go on the listener (when it runs); /console hands out its login links.
        self.traces = pipeline.traces
        self.console = console_install.install(
            commands, self.listener, config_store, memory.service, rag.service, planner, pipeline.traces,
            metrics, tools.mcp, router.dispatcher.queue_depths, stores.database,
        )  # fmt: skip
        self._backlog: list[Turn] = []
        self._stopped = False
        self._syncing: asyncio.Task[None] | None = None
        self._following_config: asyncio.Task[None] | None = None
        self._adopting: asyncio.Task[None] | None = None
        self.stages = [
            Stage("model client", _nothing, self._close_models),
            # Stopped after every store: its last round makes what they wrote last durable.
            Stage("deferred fsyncs", self._start_syncing, self._stop_syncing),
            # Opened before the stores read from it, closed after the last of them wrote.
            Stage("database", self._open_database, self._close_database),
            # Every store writes through on each change; the ledger is closed once nothing can record in it.
            Stage("stores", self._read_backlog, self.ledger.close),
            Stage("memory", self._warm_up_memory, self.memory.close),
            Stage("knowledge graph", self._warm_up_rag, self.rag.close),
            Stage("MCP servers", self._sync_mcp, self.mcp.close),
            Stage("HTTP listener", self._start_listener, self._stop_listener),
            Stage("channels", self._start_channels, self._stop_channels),
            Stage("documents", self._resume_documents, self.documents.close),
            Stage("scheduler", self._start_scheduler, self.scheduler.shutdown),
            Stage("pipeline", self._answer_backlog, self._stop_taking_messages),
        ]

    async def _answer_again(self, inbound: InboundMessage, question_id: str, channel: Channel) -> None:
        # /retry goes through the router (made after the commands), which asks the ledger for a new turn.
        await self.router.answer_again(inbound, question_id, channel)

    def add_channels(self, channels: list[Channel]) -> None:
        """Channels to run (before `start`): the configured ones (`configured_channels`) or the terminal's."""
        self.channels.extend(channels)

    def owner_chat(self) -> tuple[str, str] | None:
        """The owner's own chat among the running channels: their private Telegram chat (a private chat's
        id is its user's id), else the terminal; None while there is no owner to reach."""
        channel_types = self._channel_types()
        allowed_users = self.config_store.current_sync().access.allowed_users
        if "telegram" in channel_types and allowed_users:
            return "telegram", str(allowed_users[0])
        if "console" in channel_types:
            return "console", "local"
        return None

    def configured_channels(self) -> list[Channel]:
        """The channels the environment configures (Telegram when `TELEGRAM_BOT_TOKEN` is set), not added."""
        menu = [(command.name, command.description) for command in self.commands.commands()]
        database = self.stores.database
        # Processes sharing the database poll Telegram one at a time (two pollers of one token get 409s).
        lease = (lambda: database.lock(POLLER_LEASE)) if database is not None else None
        return channels_install.install(
            self.env, self.config_store.current_sync, menu, self.ledger, self.listener, poller_lease=lease
        )

    async def start(self) -> None:
        """Run every stage's start, in order; on a failure the caller stops (`stop` undoes what started)."""
        for stage in self.stages:
            await stage.start()
        settle_after_load()

    async def stop(self, deadline_seconds: float = STOP_DEADLINE_SECONDS) -> None:
        """Stop taking messages, let runs in progress finish (bounded) and write what they left unwritten,
        then release everything, in the reverse order of the stages, within `deadline_seconds`. A stage
        that fails to stop, or is still stopping at the deadline, is logged; the others still stop."""
        if self._stopped:
            return
        self._stopped = True
        log.info("[App] Stopping")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_seconds
        for stage in reversed(self.stages):
            budget = max(deadline - loop.time(), STAGE_STOP_MIN_SECONDS)
            try:
                await asyncio.wait_for(stage.stop(), budget)
            except TimeoutError:
                log.warning(
                    "[App] Stopping %s took over %.1f s: left, so that the process ends in time", stage.name, budget
                )
            except Exception:
                log.exception("[App] Stopping %s failed", stage.name)
        log.info("[App] Stopped")

    # -- the stages ---------------------------------------------------------------------------------

    def _channel_types(self) -> set[str]:
        return {channel.channel_type for channel in self.channels}

    async def _close_models(self) -> None:
        await self.llm.close()
        await self._embedders.close()

    async def _start_syncing(self) -> None:
        self._syncing = asyncio.create_task(self.deferred_sync.run(), name="deferred fsyncs")

    async def _stop_syncing(self) -> None:
        if self._syncing is not None:
            self._syncing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._syncing
        await self.deferred_sync.sync()

    async def _open_database(self) -> None:
        await self.stores.start()
        if self.stores.database is None:
            return
        # The runtime configuration is the database's row (once one is written): written there, followed there.
        row = RuntimeConfigRow(self.stores.database)
        self.config_store.use_database(await row.read(), row.write)
        await self.config_store.current()
        self._following_config = asyncio.create_task(row.follow(self.config_store), name="runtime-config follower")

    async def _close_database(self) -> None:
        if self._following_config is not None:
            self._following_config.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._following_config
        await self.stores.close()

    async def _read_backlog(self) -> None:
        await self.reminders.load()
        # A move a crash left midway is finished before any chat is read.
        await self.chat_moves.resume()
        # Read before anything can arrive, so a message taken now is never mistaken for an old one.
        self._backlog = await self.ledger.reopen(self.sessions.get, self._channel_types())

    async def _warm_up_memory(self) -> None:
        self.memory.warm_up((await self.config_store.current()).memory)

    async def _warm_up_rag(self) -> None:
        self.rag.warm_up()

    async def _sync_mcp(self) -> None:
        await self.mcp.sync(await self.config_store.current())

    async def _start_listener(self) -> None:
        # Before the channels: a webhook channel registers its URL, and its routes must answer by then.
        if self.listener is not None:
            await self.listener.start()

    async def _stop_listener(self) -> None:
        if self.listener is not None:
            await self.listener.stop()

    async def _start_channels(self) -> None:
        for channel in self.channels:
            channel.chat_moved = self.chat_moves.move
            await channel.start(_handler_for(self, channel))
            log.info("[App] Channel %s started", channel.channel_type)
        self.notices.connect(_owner_delivery(self))

    async def _stop_channels(self) -> None:
        await self.notices.close()
        for channel in self.channels:
            await channel.stop()

    async def _resume_documents(self) -> None:
        await self.documents.resume({channel.channel_type: channel for channel in self.channels})

    async def _start_scheduler(self) -> None:
        self.reminders.connect(_chat_delivery(self), self._channel_types())
        self.scheduler.start()

    async def _answer_backlog(self) -> None:
        self.router.resume(self._backlog, self.channels)
        self._backlog = []
        if self.stores.ledger.shared:
            self._adopting = asyncio.create_task(self._adopt_left_work(), name="work left by other processes")

    async def _adopt_left_work(self) -> None:
        """Take over what another process sharing the database left when it stopped or died: its open turns,
        answered here, and the documents it was reading, watched here."""
        while True:
            await asyncio.sleep(ADOPT_EVERY_SECONDS)
            try:
                turns = await self.ledger.adopt(self._session_read_again, self._channel_types())
            except OSError as error:
                log.error("[App] Could not look for turns other processes left open: %s", error)
            else:
                self.router.resume(turns, self.channels)
            try:
                await self.documents.adopt()
            except OSError as error:
                log.error("[App] Could not look for documents other processes left being read: %s", error)

    async def _session_read_again(self, session_id: str) -> AgentSession | None:
        # Another process answered the chat last; a chat this one is answering now keeps the session it holds.
        if session_id not in self.router.dispatcher.queue_depths():
            self.sessions.reread(session_id)
        return await self.sessions.get(session_id)

    async def _stop_taking_messages(self) -> None:
        adopting, self._adopting = self._adopting, None
        if adopting is not None:
            adopting.cancel()
            await asyncio.gather(adopting, return_exceptions=True)
        for channel in self.channels:
            await channel.stop_receiving()
        await self.router.dispatcher.close(SHUTDOWN_GRACE_SECONDS)
        await self.chat_moves.settled()
        # The question of a turn is written with its answer: a turn the stop cut short has it written now.
        await self.sessions.write_unwritten()
        await self.traces.settle()

    def _listener(self) -> HttpListener | None:
        """The HTTP listener, in webhook mode or when `BOT_LISTEN_PORT` is set; channels add their routes."""
        env = self.env
        if not env.listener_wanted():
            return None
        port = env.bot_listen_port if env.bot_listen_port is not None else DEFAULT_LISTEN_PORT
        return HttpListener(env.bot_listen_host, port, lambda: health_report(self), self.metrics.render)


def health_report(app: Application) -> tuple[bool, dict[str, object]]:
    """`/healthz`: healthy while every channel receives, the scheduler runs and, with `BOT_DATABASE_URL`,
    this process reaches the database (its last statement or heartbeat got an answer)."""
    receiving = {channel.channel_type: channel.receiving for channel in app.channels}
    last = app.llm.last_call
    details: dict[str, object] = {
        "channels": receiving,
        "scheduler": app.scheduler.running,
        "lastModelCall": {"at": last[0].isoformat(), "outcome": last[1]} if last else None,
    }
    database = app.stores.database
    if database is not None:
        details["database"] = database.reachable
    reached = database is None or database.reachable
    return all(receiving.values()) and app.scheduler.running and reached, details


def _chat_delivery(app: Application) -> Deliver:
    """Sends a message of the bot's own (a reminder, a notice) to a chat, and keeps it in that chat's
    conversation, so the model knows what the user was told."""
    by_type = {channel.channel_type: channel for channel in app.channels}

    async def deliver(channel_type: str, chat_id: str, text: str) -> None:
        await by_type[channel_type].send_text(chat_id, text)
        session = await app.sessions.get_or_create(channel_type, chat_id)
        async with app.sessions.lock_for(session.id):
            await app.sessions.append_messages(session, [Message.assistant(text)])

    return deliver


def _owner_delivery(app: Application) -> DeliverToOwner:
    deliver = _chat_delivery(app)

    async def deliver_to_owner(text: str) -> bool:
        target = app.owner_chat()
        if target is None:
            return False
        await deliver(*target, text)
        return True

    return deliver_to_owner


def _handler_for(app: Application, channel: Channel) -> InboundHandler:
    async def handle(inbound: InboundMessage) -> None:
        # A message from the chat shows it takes the bot's messages again: its paused reminders go on.
        try:
            await app.reminders.resume(inbound.session_id)
        except Exception:
            log.exception("[Scheduler] The paused reminders of %s could not be resumed", inbound.session_id)
        await app.router.accept(inbound, channel)

    return handle


def stop_on_signals(until: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, until.set)

"""Wiring: builds the services, the pipeline, the channels and the scheduler, and runs them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from bot.access.pairing import PairingStore, pairing_file
from bot.access.policy import AccessPolicy
from bot.channels.base import Channel, InboundHandler
from bot.channels.telegram_api import TelegramBackend
from bot.channels.telegram_channel import TelegramChannel, WebhookSetup
from bot.clock import Clock, resolve_timezone
from bot.commands.basic import register_basic_commands
from bot.commands.compaction import register_compaction_commands
from bot.commands.conversation import register_conversation_commands
from bot.commands.docs import register_docs_command
from bot.commands.memory import register_memory_commands
from bot.commands.model import ModelSwitch, register_model_command
from bot.commands.registry import CommandRegistry
from bot.commands.status import StatusReporter
from bot.compaction.history_search import HistorySearch, search_history_tool
from bot.compaction.service import CompactionService
from bot.compaction.summarizer import Summarizer
from bot.context.estimator import TokenEstimator
from bot.context.planner import ContextPlanner
from bot.domain.inbound import InboundMessage
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.http.listener import HttpListener
from bot.ledger.turns import TurnLedger
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.llm.models import ModelRegistry
from bot.logging_setup import secrets_in_environment
from bot.media.intake import MediaIntake, VisionSupport
from bot.media.store import MediaStore
from bot.memory.compaction_sink import PreCompactionMemory
from bot.memory.maintenance import run_maintenance
from bot.memory.service import MemoryService
from bot.memory.tools import MemoryToolSource
from bot.metrics import BotMetrics
from bot.pipeline.outbound import Outbound
from bot.pipeline.router import InboundRouter
from bot.pipeline.runner import PipelineRunner
from bot.pipeline.systems.auto_compaction import AutoCompactionSystem
from bot.pipeline.systems.context_building import ContextBuildingSystem
from bot.pipeline.systems.memory_persist import MemoryPersistSystem
from bot.pipeline.systems.rag_indexing import RagIndexingSystem
from bot.pipeline.systems.tool_loop import ToolLoopExecutionSystem
from bot.pipeline.turn_storage import stored_question
from bot.rag.factory import build_rag_service
from bot.rag.service import RagService
from bot.rag.tool import rag_query_tool
from bot.rag.uploads import DocumentReader
from bot.runtime_config import InvalidRuntimeConfig, RuntimeConfigStore
from bot.scheduler.cron import InvalidCron
from bot.scheduler.idle_compaction import IdleCompactor
from bot.scheduler.reminder_tools import register_reminder_tools
from bot.scheduler.reminders import Deliver, ReminderService
from bot.scheduler.service import BotScheduler
from bot.sessions.service import SessionService
from bot.settings import EnvSettings
from bot.shipped import shipped_path
from bot.skills.library import SkillLibrary
from bot.skills.tools import SkillTools
from bot.storage.files import remove_stale_temp_files
from bot.tools.mcp import McpManager
from bot.tools.registry import ToolRegistry
from bot.tools.web import WebTools
from bot.tools.workspace_files import register_workspace_file_tools
from bot.workspace import Workspace

log = logging.getLogger(__name__)

# SIGTERM must end the process within 10 s: runs in progress get this long to finish.
SHUTDOWN_GRACE_SECONDS = 7.0
DEFAULT_LISTEN_PORT = 8080
CONFIG_CHECK_INTERVAL_SECONDS = 5.0
RAG_TICK_SECONDS = 1.0


@dataclass
class BotServices:
    """Everything a channel needs behind it, built once per process."""

    env: EnvSettings
    workspace: Workspace
    clock: Clock
    config_store: RuntimeConfigStore
    models: ModelRegistry
    sessions: SessionService
    llm: LlmClient
    tools: ToolRegistry
    runner: PipelineRunner
    commands: CommandRegistry
    status: StatusReporter
    router: InboundRouter
    scheduler: BotScheduler
    reminders: ReminderService
    metrics: BotMetrics
    rag: RagService
    memory: MemoryService
    ledger: TurnLedger
    documents: DocumentReader
    mcp: McpManager
    skills: SkillLibrary


def prepare_workspace(env: EnvSettings) -> Workspace:
    """The workspace, with whatever was missing filled in from `workspace_template/`."""
    workspace = Workspace(env.bot_workspace)
    workspace.complete_from(shipped_path("workspace_template"))
    removed = remove_stale_temp_files(workspace.root)
    if removed:
        log.info("[Workspace] Removed %d temp files left by an interrupted write", removed)
    return workspace


def build_services(env: EnvSettings) -> BotServices:
    workspace = prepare_workspace(env)
    clock = Clock(resolve_timezone(env.bot_timezone))
    config_dir = shipped_path("config")
    config_store = RuntimeConfigStore(
        config_dir / "runtime-config.json",
        workspace.runtime_config_file,
        {"llm": {"model": env.bot_model}} if env.bot_model else None,
    )
    config_store.load_now()
    model_switch = ModelSwitch(config_store, workspace.root / "state" / "model.json")
    model_switch.restore()
    models = ModelRegistry.load(config_dir / "models.json", workspace.models_file)
    sessions = SessionService(workspace.sessions_dir)
    api_key = env.openai_api_key.get_secret_value() if env.openai_api_key else None
    metrics = BotMetrics()
    llm = LlmClient(api_key, env.openai_base_url, metrics)
    mcp = McpManager(lambda: config_store.config)
    # Tool results never carry a secret: the bot's, any variable of the environment named like one (a page or
    # a server could echo it), nor what an MCP server's config took from the environment.
    tools = ToolRegistry(metrics, lambda: [*env.secrets(), *secrets_in_environment(os.environ), *mcp.secrets()])
    register_workspace_file_tools(tools, workspace.root)
    search_keys = {
        name: key.get_secret_value()
        for name, key in (("brave", env.brave_api_key), ("tavily", env.tavily_api_key))
        if key is not None
    }
    tools.add_source(WebTools(lambda: config_store.config, search_keys))
    tools.add_source(mcp)
    estimator = TokenEstimator()
    embedders = Embedders(llm)  # one offline embedding model for memory and the knowledge graph
    memory = MemoryService(workspace, clock, llm, estimator, embedders)
    tools.add_source(MemoryToolSource(memory, lambda: config_store.config))
    tools.register(search_history_tool(HistorySearch(sessions.archive)))
    rag = build_rag_service(workspace, env, llm, config_store, estimator, embedders)
    tools.register(rag_query_tool(rag))

    async def forget_in_rag(message_ids: list[str]) -> None:
        await rag.forget_documents(await rag.documents_for_messages(message_ids))

    memory.on_forget(forget_in_rag)
    planner = ContextPlanner(estimator, models, tools.schemas)
    compaction = CompactionService(sessions, Summarizer(llm, models, estimator), planner, config_store)
    compaction.set_pre_compaction_sink(PreCompactionMemory(memory, config_store))
    skills = SkillLibrary(workspace.skills_dir)
    skill_tools = SkillTools(skills, sessions, lambda: config_store.config)
    tools.add_source(skill_tools)
    media_store = MediaStore(workspace.root)
    vision = VisionSupport()
    memory_persist = MemoryPersistSystem(memory, clock)
    rag_indexing = RagIndexingSystem(rag, clock)
    systems = [
        AutoCompactionSystem(compaction),
        ContextBuildingSystem(workspace, clock, planner, memory, rag, skills),
        ToolLoopExecutionSystem(llm, sessions, tools, workspace.root, compaction, media_store, vision),
        memory_persist,
        rag_indexing,
    ]
    runner = PipelineRunner(systems, sessions, config_store, metrics)
    ledger = TurnLedger(workspace.root / "state" / "turns.jsonl")
    outbound = Outbound(ledger, metrics)
    status = StatusReporter(config_store, planner, memory, rag, mcp, skills)
    commands = CommandRegistry()
    register_basic_commands(commands, sessions, status)
    register_compaction_commands(commands, sessions, compaction, config_store)
    register_memory_commands(commands, memory, config_store)
    skill_tools.register_command(commands)

    async def forget_dropped_exchange(session: AgentSession, dropped: list[Message]) -> None:
        # What the systems after the reply wrote for an exchange /retry or /undo dropped, each takes back.
        await memory_persist.retract(session, dropped, (await config_store.current()).memory)
        await rag_indexing.retract(dropped)

    register_conversation_commands(
        commands, sessions, lambda inbound, on: router.answer_again(inbound, on), forget_dropped_exchange, clock
    )
    register_model_command(commands, model_switch, config_store)
    access = AccessPolicy(config_store, PairingStore(pairing_file(workspace.root)))
    documents = DocumentReader(rag, workspace.rag_dir, lambda: config_store.config, clock)
    register_docs_command(commands, documents)
    media = MediaIntake(media_store, llm, vision)
    router = InboundRouter(runner, commands, access, ledger, documents, media, config_store, outbound)
    metrics.watch_queues(router.dispatcher.queue_depths)
    scheduler = BotScheduler()

    async def check_config() -> None:
        await mcp.sync(await config_store.current())  # MCP servers added or removed start or stop now

    scheduler.add_interval_job("runtime-config check", CONFIG_CHECK_INTERVAL_SECONDS, check_config)

    async def flush_rag_queue() -> None:
        await rag.flush_if_due()

    # A short tick that decides from the live configuration (`rag.idleFlushSeconds`, `flushIntervalSeconds`).
    scheduler.add_interval_job("rag indexing", RAG_TICK_SECONDS, flush_rag_queue)
    reminders = ReminderService(workspace.reminders_file, clock.zone, str(clock.zone))
    register_reminder_tools(tools, commands, reminders)
    scheduler_config = config_store.config.scheduler
    late_after = timedelta(seconds=scheduler_config.reminder_late_after_seconds)

    async def fire_reminders() -> None:
        await reminders.fire_due(late_after=late_after)

    scheduler.add_interval_job("reminders", scheduler_config.reminder_check_seconds, fire_reminders)
    idle = IdleCompactor(sessions, compaction, config_store, lambda sid: sid in router.dispatcher.queue_depths())

    async def compact_idle() -> None:
        await idle.run()

    scheduler.add_interval_job("idle compaction", scheduler_config.idle_check_seconds, compact_idle)

    async def maintain_memory() -> None:
        await run_maintenance(memory, (await config_store.current()).memory, clock.now())

    try:
        scheduler.add_cron_job("memory maintenance", scheduler_config.maintenance_cron, clock.zone, maintain_memory)
    except InvalidCron as error:
        raise InvalidRuntimeConfig(f"{workspace.runtime_config_file}: scheduler.maintenanceCron: {error}") from error
    return BotServices(
        env,
        workspace,
        clock,
        config_store,
        models,
        sessions,
        llm,
        tools,
        runner,
        commands,
        status,
        router,
        scheduler,
        reminders,
        metrics,
        rag,
        memory,
        ledger,
        documents,
        mcp,
        skills,
    )


def build_listener(
    env: EnvSettings, services: BotServices, channels: Callable[[], list[Channel]]
) -> HttpListener | None:
    """The HTTP listener, in webhook mode or when `BOT_LISTEN_PORT` is set; channels add their routes."""
    if env.telegram_mode != "webhook" and env.bot_listen_port is None:
        return None
    port = env.bot_listen_port if env.bot_listen_port is not None else DEFAULT_LISTEN_PORT
    return HttpListener(env.bot_listen_host, port, lambda: health_report(services, channels()), services.metrics.render)


def health_report(services: BotServices, channels: list[Channel]) -> tuple[bool, dict[str, object]]:
    """`/healthz`: healthy while every channel receives and the scheduler runs."""
    receiving = {channel.channel_type: channel.receiving for channel in channels}
    last = services.llm.last_call
    details: dict[str, object] = {
        "channels": receiving,
        "scheduler": services.scheduler.running,
        "lastModelCall": {"at": last[0].isoformat(), "outcome": last[1]} if last else None,
    }
    return all(receiving.values()) and services.scheduler.running, details


def build_channels(env: EnvSettings, services: BotServices, listener: HttpListener | None = None) -> list[Channel]:
    """The channels the environment configures (Telegram when `TELEGRAM_BOT_TOKEN` is set)."""
    if env.telegram_bot_token is None:
        log.warning("[App] No channel configured: set TELEGRAM_BOT_TOKEN to enable Telegram")
        return []
    token = env.telegram_bot_token.get_secret_value()
    webhook = None
    if env.telegram_mode == "webhook":
        if not env.telegram_webhook_url or listener is None:
            raise SystemExit("TELEGRAM_MODE=webhook needs TELEGRAM_WEBHOOK_URL (and the HTTP listener)")
        # Without a configured secret a random one is registered: every request is still checked.
        secret = env.telegram_webhook_secret.get_secret_value() if env.telegram_webhook_secret else None
        webhook = WebhookSetup(env.telegram_webhook_url, secret or secrets.token_urlsafe(32), listener)
    config_store = services.config_store
    return [
        TelegramChannel(
            _telegram_backend(env.telegram_backend, token, env.telegram_api_base_url),
            config_store.current_sync,
            [(command.name, command.description) for command in services.commands.commands()],
            services.ledger,
            webhook,
        )
    ]


def _telegram_backend(name: str, token: str, api_root: str) -> TelegramBackend:
    # Imported here so a process loads only the client library it uses.
    if name == "aiogram":
        from bot.channels.telegram_aiogram import AiogramBackend

        return AiogramBackend(token, api_root)
    from bot.channels.telegram_ptb import PtbBackend

    return PtbBackend(token, api_root)


async def serve(
    services: BotServices, channels: list[Channel], until: asyncio.Event, listener: HttpListener | None = None
) -> None:
    """Run the listener, the channels and the scheduler until `until` is set, then stop gracefully."""
    try:
        await start(services, channels, listener)
        await until.wait()
    finally:
        await shutdown(services, channels, listener)


async def start(services: BotServices, channels: list[Channel], listener: HttpListener | None = None) -> None:
    """Start the HTTP listener (its routes are in place), then every channel, then the scheduler; then
    answer what the last run left unanswered."""
    # Read before anything can arrive, so a message taken now is never mistaken for an old one.
    backlog = await unfinished_messages(services, {channel.channel_type for channel in channels})
    if listener is not None:
        await listener.start()
    for channel in channels:
        await channel.start(_handler_for(services.router, channel))
        log.info("[App] Channel %s started", channel.channel_type)
    services.reminders.connect(_reminder_delivery(services, channels), {c.channel_type for c in channels})
    services.scheduler.start()
    config = await services.config_store.current()
    services.memory.warm_up(config.memory)
    services.rag.warm_up()
    await services.mcp.sync(config)
    services.documents.resume({channel.channel_type: channel for channel in channels})
    resubmit(services, channels, backlog)


async def unfinished_messages(services: BotServices, channel_types: set[str]) -> list[InboundMessage]:
    """The turns the last run left open in the ledger, in arrival order: never begun, cut short, or
    answered without the delivery of the answer being recorded. One whose question the session holds
    already, or whose reply the ledger holds, comes back `resumed`: it is not stored twice, and an
    answer found is sent as it is."""
    backlog: list[InboundMessage] = []
    for turn in await services.ledger.load(legacy_state=services.ledger.path.parent):
        inbound = turn.inbound
        if inbound.channel_type not in channel_types:
            continue  # its channel is not running now: it waits for a start that has it
        session = await services.sessions.get(inbound.session_id)
        if turn.reply is not None or (session is not None and stored_question(session, turn.turn_id) is not None):
            inbound = dataclasses.replace(inbound, resumed=True)
        backlog.append(inbound)
    if backlog:
        log.info("[App] %d messages were left unanswered by the last stop; answering them", len(backlog))
    return backlog


def resubmit(services: BotServices, channels: list[Channel], backlog: list[InboundMessage]) -> None:
    by_type = {channel.channel_type: channel for channel in channels}
    for inbound in backlog:
        services.router.resubmit(inbound, by_type[inbound.channel_type])


def _reminder_delivery(services: BotServices, channels: list[Channel]) -> Deliver:
    by_type = {channel.channel_type: channel for channel in channels}

    async def deliver(channel_type: str, chat_id: str, text: str) -> None:
        await by_type[channel_type].send_text(chat_id, text)
        # Kept in the conversation, so the model knows what it reminded the user of.
        session = await services.sessions.get_or_create(channel_type, chat_id)
        async with services.sessions.lock_for(session.id):
            await services.sessions.append_messages(session, [Message.assistant(text)])

    return deliver


def _handler_for(router: InboundRouter, channel: Channel) -> InboundHandler:
    async def handle(inbound: InboundMessage) -> None:
        await router.accept(inbound, channel)

    return handle


async def shutdown(services: BotServices, channels: list[Channel], listener: HttpListener | None = None) -> None:
    """Stop taking messages, let runs in progress finish (bounded), then release everything.

    Every store writes through on each change, but for the question of a turn, written with its answer:
    a turn the stop cut short has its question written here.
    """
    log.info("[App] Stopping")
    for channel in channels:
        await channel.stop_receiving()
    await services.router.dispatcher.close(SHUTDOWN_GRACE_SECONDS)
    await services.sessions.write_unwritten()
    await services.scheduler.shutdown()
    for channel in channels:
        await channel.stop()
    await services.ledger.close()
    if listener is not None:
        await listener.stop()
    await services.documents.close()
    await services.mcp.close()
    await services.rag.close()
    await services.memory.close()
    await services.llm.close()
    log.info("[App] Stopped")


def stop_on_signals(until: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, until.set)

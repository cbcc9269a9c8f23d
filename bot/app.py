"""Wiring: builds the services, the pipeline, the channels and the scheduler, and runs them."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from bot.channels.base import Channel, InboundHandler
from bot.clock import Clock, resolve_timezone
from bot.commands.basic import register_basic_commands
from bot.commands.registry import CommandRegistry
from bot.commands.status import StatusReporter
from bot.compaction.estimator import TokenEstimator
from bot.domain.inbound import InboundMessage
from bot.llm.client import LlmClient
from bot.llm.models import ModelRegistry
from bot.pipeline.router import InboundRouter
from bot.pipeline.runner import PipelineRunner
from bot.pipeline.systems.context_building import ContextBuildingSystem
from bot.pipeline.systems.tool_loop import ToolLoopExecutionSystem
from bot.runtime_config import RuntimeConfigStore
from bot.scheduler.service import BotScheduler
from bot.sessions.service import SessionService
from bot.settings import EnvSettings
from bot.shipped import shipped_path
from bot.storage.files import remove_stale_temp_files
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace

log = logging.getLogger(__name__)

# SIGTERM must end the process within 10 s: runs in progress get this long to finish.
SHUTDOWN_GRACE_SECONDS = 7.0
CONFIG_CHECK_INTERVAL_SECONDS = 5.0


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
    config_store = RuntimeConfigStore(config_dir / "runtime-config.json", workspace.runtime_config_file)
    config_store.load_now()
    models = ModelRegistry.load(config_dir / "models.json", workspace.models_file)
    sessions = SessionService(workspace.sessions_dir)
    api_key = env.openai_api_key.get_secret_value() if env.openai_api_key else None
    llm = LlmClient(api_key, env.openai_base_url)
    tools = ToolRegistry()
    systems = [ContextBuildingSystem(workspace, clock), ToolLoopExecutionSystem(llm, sessions, tools)]
    runner = PipelineRunner(systems, sessions, config_store, env.bot_model)
    estimator = TokenEstimator()
    status = StatusReporter(workspace, config_store, models, estimator, clock, env.bot_model)
    commands = CommandRegistry()
    register_basic_commands(commands, sessions, status)
    router = InboundRouter(runner, commands)
    scheduler = BotScheduler()

    async def check_config() -> None:
        await config_store.current()

    scheduler.add_interval_job("runtime-config check", CONFIG_CHECK_INTERVAL_SECONDS, check_config)
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
    )


def build_channels(env: EnvSettings) -> list[Channel]:
    """The channels the environment configures (Telegram when `TELEGRAM_BOT_TOKEN` is set)."""
    if env.telegram_bot_token is None:
        log.warning("[App] No channel configured: set TELEGRAM_BOT_TOKEN to enable Telegram")
        return []
    raise SystemExit("The Telegram channel is not part of this build yet; unset TELEGRAM_BOT_TOKEN")


async def serve(services: BotServices, channels: list[Channel], until: asyncio.Event) -> None:
    """Run the channels and the scheduler until `until` is set, then stop gracefully."""
    for channel in channels:
        await channel.start(_handler_for(services.router, channel))
        log.info("[App] Channel %s started", channel.channel_type)
    services.scheduler.start()
    try:
        await until.wait()
    finally:
        await shutdown(services, channels)


def _handler_for(router: InboundRouter, channel: Channel) -> InboundHandler:
    async def handle(inbound: InboundMessage) -> None:
        await router.accept(inbound, channel)

    return handle


async def shutdown(services: BotServices, channels: list[Channel]) -> None:
    """Stop taking messages, let runs in progress finish (bounded), then release everything.

    Every store writes through on each change, so nothing is left to flush once the runs are done.
    """
    log.info("[App] Stopping")
    for channel in channels:
        await channel.stop_receiving()
    await services.router.dispatcher.close(SHUTDOWN_GRACE_SECONDS)
    services.scheduler.shutdown()
    for channel in channels:
        await channel.stop()
    await services.llm.close()
    log.info("[App] Stopped")


def stop_on_signals(until: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, until.set)

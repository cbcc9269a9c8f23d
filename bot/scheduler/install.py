"""What the scheduler package gives the rest of the bot: the scheduler with the bot's periodic jobs
(runtime-config check, RAG indexing, reminders, idle compaction, memory maintenance), and the reminders
with their tools and `/reminders` command."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from bot.clock import Clock
from bot.commands.registry import CommandRegistry
from bot.compaction.service import CompactionService
from bot.cron import InvalidCron
from bot.memory.maintenance import run_maintenance
from bot.memory.service import MemoryService
from bot.rag.service import RagService
from bot.runtime_config import InvalidRuntimeConfig, RuntimeConfigStore
from bot.scheduler.idle_compaction import IdleCompactor
from bot.scheduler.reminder_store import ReminderStore
from bot.scheduler.reminder_tools import register_reminder_tools
from bot.scheduler.reminders import ReminderService
from bot.scheduler.service import BotScheduler
from bot.sessions.service import SessionService
from bot.tools.registry import ToolRegistry

# An edit of runtime-config.json is read within this even when no message comes; what follows an edit (MCP
# servers starting or stopping) is done by the store's listeners as it is read.
CONFIG_CHECK_INTERVAL_SECONDS = 1.0
RAG_TICK_SECONDS = 1.0


@dataclass(frozen=True)
class InstalledScheduler:
    """The scheduler (started and stopped by the app's lifespan) and the reminders it fires."""

    scheduler: BotScheduler
    reminders: ReminderService


def install(
    reminder_store: ReminderStore,
    runtime_config_file: Path,
    clock: Clock,
    sessions: SessionService,
    config_store: RuntimeConfigStore,
    compaction: CompactionService,
    memory: MemoryService,
    rag: RagService,
    tools: ToolRegistry,
    commands: CommandRegistry,
    chat_is_active: Callable[[str], bool],
) -> InstalledScheduler:
    scheduler = BotScheduler()

    async def check_config() -> None:
        await config_store.current()

    scheduler.add_interval_job("runtime-config check", CONFIG_CHECK_INTERVAL_SECONDS, check_config)

    async def flush_rag_queue() -> None:
        await rag.flush_if_due()

    # A short tick that decides from the live configuration (`rag.idleFlushSeconds`, `flushIntervalSeconds`).
    scheduler.add_interval_job("rag indexing", RAG_TICK_SECONDS, flush_rag_queue)
    reminders = ReminderService(reminder_store, clock.zone, str(clock.zone))
    register_reminder_tools(tools, commands, reminders)
    scheduler_config = config_store.in_force().scheduler
    late_after = timedelta(seconds=scheduler_config.reminder_late_after_seconds)

    async def fire_reminders() -> None:
        await reminders.fire_due(late_after=late_after)

    scheduler.add_interval_job("reminders", scheduler_config.reminder_check_seconds, fire_reminders)
    idle = IdleCompactor(sessions, compaction, config_store, chat_is_active)

    async def compact_idle() -> None:
        await idle.run()

    scheduler.add_interval_job("idle compaction", scheduler_config.idle_check_seconds, compact_idle)

    async def maintain_memory() -> None:
        await run_maintenance(memory, (await config_store.current()).memory, clock.now())

    try:
        scheduler.add_cron_job("memory maintenance", scheduler_config.maintenance_cron, clock.zone, maintain_memory)
    except InvalidCron as error:
        raise InvalidRuntimeConfig(f"{runtime_config_file}: scheduler.maintenanceCron: {error}") from error
    return InstalledScheduler(scheduler, reminders)

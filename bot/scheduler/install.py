"""What the scheduler package gives the rest of the bot: the scheduler with the bot's periodic jobs
(runtime-config check, RAG indexing, reminders, idle compaction, memory maintenance), and the reminders
with their tools and `/reminders` command."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from bot.clock import Clock
from bot.commands.registry import CommandRegistry
from bot.compaction.service import CompactionService
from bot.memory.maintenance import run_maintenance
from bot.memory.service import MemoryService
from bot.rag.service import RagService
from bot.runtime_config import RuntimeConfigStore
from bot.scheduler.idle_compaction import IdleCompactor
from bot.scheduler.reminder_store import ReminderStore
from bot.scheduler.reminder_tools import register_reminder_tools
from bot.scheduler.reminders import ReminderService
from bot.scheduler.service import BotScheduler
from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig, SchedulerConfig
from bot.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

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

    async def fire_reminders() -> None:
        late_after = timedelta(seconds=config_store.in_force().scheduler.reminder_late_after_seconds)
        await reminders.fire_due(late_after=late_after)

    idle = IdleCompactor(sessions, compaction, config_store, chat_is_active)

    async def compact_idle() -> None:
        await idle.run()

    async def maintain_memory() -> None:
        await run_maintenance(memory, (await config_store.current()).memory, clock.now())

    def schedule(config: SchedulerConfig) -> None:
        # The cron expression was checked when the configuration was read (a bad one is refused alone).
        scheduler.add_interval_job("reminders", config.reminder_check_seconds, fire_reminders)
        scheduler.add_interval_job("idle compaction", config.idle_check_seconds, compact_idle)
        scheduler.add_cron_job("memory maintenance", config.maintenance_cron, clock.zone, maintain_memory)

    scheduled = [_timing(config_store.in_force().scheduler)]
    schedule(config_store.in_force().scheduler)

    def reschedule(config: RuntimeConfig) -> None:
        timing = _timing(config.scheduler)
        if timing != scheduled[0]:
            scheduled[0] = timing
            schedule(config.scheduler)
            log.info("[Scheduler] Rescheduled: reminders every %gs, idle chats every %gs, maintenance at %r", *timing)

    config_store.on_change(reschedule)
    return InstalledScheduler(scheduler, reminders)


def _timing(config: SchedulerConfig) -> tuple[float, float, str]:
    """What the jobs are scheduled by (a change of the rest of the section needs no new schedule)."""
    return config.reminder_check_seconds, config.idle_check_seconds, config.maintenance_cron

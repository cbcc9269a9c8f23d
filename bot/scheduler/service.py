"""`BotScheduler`: the one `AsyncIOScheduler` of the running bot.

Every job is logged with its outcome and duration, never overlaps itself, and a failing job never
takes the bot down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import tzinfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.scheduler.cron import cron_trigger

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class BotScheduler:
    """Runs periodic jobs inside the bot's event loop."""

    def __init__(self) -> None:
        self._scheduler = AsyncIOScheduler()

    def add_interval_job(self, name: str, seconds: float, job: Job) -> None:
        self._scheduler.add_job(
            _logged(name, job),
            "interval",
            seconds=seconds,
            id=name,
            name=name,
            max_instances=1,
            coalesce=True,
            replace_existing=True,
        )

    def add_cron_job(self, name: str, expression: str, zone: tzinfo, job: Job) -> None:
        """Run `job` on a 5-field cron schedule in `zone`; raises `InvalidCron` for a bad expression."""
        self._scheduler.add_job(
            _logged(name, job), cron_trigger(expression, zone), id=name, name=name,
            max_instances=1, coalesce=True, replace_existing=True,
        )  # fmt: skip

    def job_names(self) -> list[str]:
        return sorted(job.name for job in self._scheduler.get_jobs())

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    def start(self) -> None:
        self._scheduler.start()
        log.info("[Scheduler] Started with %d jobs", len(self._scheduler.get_jobs()))

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
            log.info("[Scheduler] Stopped")


def _logged(name: str, job: Job) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        started = time.monotonic()
        try:
            await job()
        except Exception:
            log.exception("[Scheduler] Job %s failed after %.2fs", name, time.monotonic() - started)
        else:
            log.debug("[Scheduler] Job %s done in %.2fs", name, time.monotonic() - started)

    return run

"""`BotScheduler`: the one `AsyncIOScheduler` of the running bot.

Every job is logged with its outcome and duration, never overlaps itself (a run due while the previous
one goes on is skipped without a word: a long indexing batch is not news every second), and a failing
job never takes the bot down. At shutdown a job in progress gets a moment to finish and is then cancelled (a job
keeps its work durable step by step: what it did not finish is done by its next run after the start).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, tzinfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.cron import cron_trigger

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]
JOB_SHUTDOWN_GRACE_SECONDS = 1.0
# APScheduler's own limit is one above ours so that it never logs a skipped run: the job's wrapper skips it.
SCHEDULER_MAX_INSTANCES = 2


class BotScheduler:
    """Runs periodic jobs inside the bot's event loop."""

    def __init__(self) -> None:
        self._scheduler = AsyncIOScheduler()
        self._running_jobs: set[asyncio.Task[object]] = set()
        self._running_names: set[str] = set()

    def add_interval_job(self, name: str, seconds: float, job: Job) -> None:
        self._scheduler.add_job(
            self._logged(name, job),
            "interval",
            seconds=seconds,
            id=name,
            name=name,
            max_instances=SCHEDULER_MAX_INSTANCES,
            coalesce=True,
            replace_existing=True,
        )

    def add_cron_job(self, name: str, expression: str, zone: tzinfo, job: Job) -> None:
        """Run `job` on a 5-field cron schedule in `zone`; raises `InvalidCron` for a bad expression."""
        self._scheduler.add_job(
            self._logged(name, job), cron_trigger(expression, zone), id=name, name=name,
            max_instances=SCHEDULER_MAX_INSTANCES, coalesce=True, replace_existing=True,
        )  # fmt: skip

    def next_run(self, name: str) -> datetime | None:
        """When the job `name` runs next (None: never, or no such job; before `start`, not yet known)."""
        job = self._scheduler.get_job(name)
        run_time: datetime | None = getattr(job, "next_run_time", None)
        return run_time

    def job_names(self) -> list[str]:
        return sorted(job.name for job in self._scheduler.get_jobs())

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    def start(self) -> None:
        self._scheduler.start()
        log.info("[Scheduler] Started with %d jobs", len(self._scheduler.get_jobs()))

    async def shutdown(self, grace_seconds: float = JOB_SHUTDOWN_GRACE_SECONDS) -> None:
        """Start no more jobs; give those in progress `grace_seconds`, then cancel them."""
        if not self._scheduler.running:
            return
        self._scheduler.pause()  # its own shutdown would cancel the jobs in progress at once
        running = set(self._running_jobs)
        if running:
            _, unfinished = await asyncio.wait(running, timeout=grace_seconds)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        self._scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # the asyncio scheduler completes its shutdown in the loop's next turn
        log.info("[Scheduler] Stopped")

    def _logged(self, name: str, job: Job) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            if name in self._running_names:
                log.debug("[Scheduler] Job %s skipped: its previous run goes on", name)
                return
            self._running_names.add(name)
            started = time.monotonic()
            task = asyncio.current_task()
            if task is not None:
                self._running_jobs.add(task)
            try:
                await job()
            except asyncio.CancelledError:
                # Only shutdown cancels a job; it ends here rather than as an error in the scheduler's log.
                log.info("[Scheduler] Job %s stopped by the shutdown after %.2fs", name, time.monotonic() - started)
            except Exception:
                log.exception("[Scheduler] Job %s failed after %.2fs", name, time.monotonic() - started)
            else:
                log.debug("[Scheduler] Job %s done in %.2fs", name, time.monotonic() - started)
            finally:
                self._running_names.discard(name)
                if task is not None:
                    self._running_jobs.discard(task)

        return run

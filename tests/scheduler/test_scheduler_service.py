"""The scheduler's jobs: run in the bot's loop, and at shutdown finished or cancelled quietly in time."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from bot.scheduler.service import BotScheduler


async def test_a_job_in_progress_at_shutdown_is_cancelled_after_the_grace_without_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = BotScheduler()
    began = asyncio.Event()
    finished = False

    async def indexing() -> None:
        nonlocal finished
        began.set()
        await asyncio.sleep(30)
        finished = True

    scheduler.add_interval_job("rag indexing", 0.05, indexing)
    scheduler.start()
    await asyncio.wait_for(began.wait(), 5)
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        await scheduler.shutdown(grace_seconds=0.2)
    assert time.monotonic() - started < 2
    assert not finished and not scheduler.running
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("stopped by the shutdown" in r.getMessage() for r in caplog.records)


async def test_a_job_that_finishes_within_the_grace_is_let_finish() -> None:
    scheduler = BotScheduler()
    began = asyncio.Event()
    finished = asyncio.Event()

    async def quick() -> None:
        began.set()
        await asyncio.sleep(0.1)
        finished.set()

    scheduler.add_interval_job("quick", 0.05, quick)
    scheduler.start()
    await asyncio.wait_for(began.wait(), 5)
    await scheduler.shutdown(grace_seconds=2)
    assert finished.is_set()


async def test_a_run_due_while_the_previous_one_goes_on_is_skipped_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = BotScheduler()
    release = asyncio.Event()
    runs = 0
    overlapping = 0
    running = 0

    async def batch() -> None:
        nonlocal runs, overlapping, running
        runs += 1
        running += 1
        overlapping = max(overlapping, running)
        await release.wait()
        running -= 1

    with caplog.at_level(logging.DEBUG):
        scheduler.add_interval_job("rag indexing", 0.02, batch)
        scheduler.start()
        while len([r for r in caplog.records if "skipped" in r.getMessage()]) < 5:
            await asyncio.sleep(0.02)
        release.set()
        await scheduler.shutdown(grace_seconds=1)
    assert runs >= 1 and overlapping == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


async def test_a_cron_job_with_both_day_fields_runs_on_either_like_cron() -> None:
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    from tests.scheduler.test_reminder_cron import cron_times

    scheduler = BotScheduler()

    async def maintain() -> None:
        return None

    zone = ZoneInfo("Europe/Berlin")
    scheduler.add_cron_job("memory maintenance", "30 3 13 * 5", zone, maintain)
    scheduler.start()
    try:
        run = scheduler.next_run("memory maintenance")
        assert run is not None
        assert run.astimezone(UTC) == cron_times("30 3 13 * 5", zone, datetime.now(UTC) - timedelta(seconds=1), 1)[0]
    finally:
        await scheduler.shutdown()

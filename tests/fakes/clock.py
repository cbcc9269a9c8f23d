"""`ManualClock`: a `bot.clock.Clock` whose time moves only when the test says (`advance`), so that what
the bot does every few seconds is proved by moving time on, never by waiting for it; `until` and `settled`
let the event loop run up to a condition, or until what is ready has run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bot.clock import Clock
from tests.fakes.telegram_server import WAIT_SECONDS


class ManualClock(Clock):
    """`now()` and `sleep()` on a time that only `advance` moves."""

    def __init__(self, start: datetime = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)) -> None:
        super().__init__(start.tzinfo or UTC)
        self._now = start
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sleeper = (self._elapsed + seconds, woken)
        self._sleepers.append(sleeper)
        try:
            await woken
        finally:
            self._sleepers.remove(sleeper)

    @property
    def sleeping(self) -> int:
        """How many waits have not ended yet."""
        return len(self._sleepers)

    def advance(self, seconds: float) -> None:
        """Move time on: every wait that ends by then is woken (it runs at the event loop's next turn)."""
        self._elapsed += seconds
        self._now += timedelta(seconds=seconds)
        for end, woken in self._sleepers:
            if end <= self._elapsed and not woken.done():
                woken.set_result(None)


async def until(condition: Callable[[], bool], timeout: float = WAIT_SECONDS) -> None:
    """Let the event loop run until `condition` holds; fails after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)


async def settled(turns: int = 20) -> None:
    """Let the event loop run what is ready (what `advance` woke, and what that started) before a check that
    nothing more happened."""
    for _ in range(turns):
        await asyncio.sleep(0)

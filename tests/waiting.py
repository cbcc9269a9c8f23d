"""`wait_until`: the one way a test waits for something the bot does after it answers (a background system,
a file watcher, a server it starts)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

from tests.fakes.telegram_server import WAIT_SECONDS

POLL_SECONDS = 0.01


async def wait_until(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS
) -> None:
    """Poll `condition` (a plain or an async function) until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(POLL_SECONDS)

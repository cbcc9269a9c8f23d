"""`LongPolling`: getUpdates in a loop that acknowledges an update only after the bot has taken it.

Telegram forgets an update once a getUpdates asks for a higher offset. The libraries' own pollers ask for
the next batch as soon as they have fetched one, before the bot has recorded it, so a crash in between
lost those messages. Here each batch is handed over update by update (the handler returns once the
message is recorded received in the turn ledger and queued), the ids of the rest are written to the
ledger, and only then does the next getUpdates acknowledge it. A crash at any point leaves each update
in the ledger, or unacknowledged and delivered again.

Polling starts by deleting any webhook (Telegram answers getUpdates with 409 while one is set). The loop
waits out 429s as asked, backs off on network errors, 5xx and refusals (another instance
polling the same token gets 409), and recovers by itself once Telegram answers again.

Processes sharing one database poll one at a time: given a `lease` (a lock held among them, lost with the
holder's connection when it dies), a process polls only while it holds it, and the others stand by,
waiting for it, so one takes over within moments when the poller stops or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from bot.channels.telegram_api import RetryAfter, TelegramApiError, TelegramBackend, UpdateHandler

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A final getUpdates at stop only acknowledges; it should not wait for new updates.
ACKNOWLEDGE_TIMEOUT_SECONDS = 5.0


class LongPolling:
    """Fetches updates, hands each over in order, acknowledges them once they are safe."""

    def __init__(
        self,
        backend: TelegramBackend,
        on_update: UpdateHandler,
        before_acknowledge: Callable[[], Awaitable[None]],
        timeout_seconds: Callable[[], int],
        allowed_updates: list[str],
        lease: Callable[[], AbstractAsyncContextManager[Callable[[], Awaitable[bool]]]] | None = None,
    ) -> None:
        """`before_acknowledge` makes what was handed over durable (the ledger's seen ids) before Telegram forgets;
        `lease`, when given, is held while polling (waiting for it while another process holds it), raises
        `OSError` when it cannot be taken, and gives a check that says whether it is still held."""
        self._backend = backend
        self._on_update = on_update
        self._before_acknowledge = before_acknowledge
        self._timeout_seconds = timeout_seconds
        self._allowed_updates = allowed_updates
        self._lease = lease
        self._offset: int | None = None
        self._acknowledged: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._handing_over = False
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="telegram polling")

    async def stop(self) -> None:
        """Stop fetching; a batch being handed over is finished first, then acknowledged."""
        if self._task is None:
            return
        self._stopping = True
        if not self._handing_over:
            self._task.cancel()  # a long poll or a backoff in progress holds nothing of ours
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        await self._acknowledge()

    async def _run(self) -> None:
        if self._lease is None:
            await self._poll()
            return
        backoff = FIRST_BACKOFF_SECONDS
        while not self._stopping:
            log.info("[Telegram] Polling: waiting for the poller lease (another process may be polling)")
            try:
                async with self._lease() as still_held:
                    log.info("[Telegram] Polling: this process holds the poller lease")
                    await self._poll(still_held)
                    if self._stopping:
                        return
                    log.warning("[Telegram] Polling: lost the poller lease (its database connection broke)")
                    backoff = FIRST_BACKOFF_SECONDS
                    continue
            except OSError as error:
                log.warning("[Telegram] Could not take the poller lease (%s); retrying in %.0f s", error, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _poll(self, still_held: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Poll until stopped, or until `still_held` says the lease is lost (another process may poll now)."""
        backoff = FIRST_BACKOFF_SECONDS
        webhook_deleted = False
        while not self._stopping:
            if still_held is not None and not await still_held():
                return
            try:
                if not webhook_deleted:  # also waits out an outage at start
                    await self._backend.delete_webhook()
                    webhook_deleted = True
                await self._before_acknowledge()
                updates = await self._backend.get_updates(self._offset, self._timeout_seconds(), self._allowed_updates)
            except RetryAfter as error:
                log.warning("[Telegram] Polling: 429, waiting %.0f s as asked", error.retry_after)
                await asyncio.sleep(error.retry_after)
                continue
            except TelegramApiError as error:
                log.warning("[Telegram] Polling failed (%s); retrying in %.0f s", error.description, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            except Exception:
                log.exception("[Telegram] Polling failed unexpectedly; retrying in %.0f s", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            self._acknowledged = self._offset
            backoff = FIRST_BACKOFF_SECONDS
            self._handing_over = True
            try:
                for update in updates:
                    await self._hand_over(update)
            finally:
                self._handing_over = False

    async def _hand_over(self, update: dict[str, Any]) -> None:
        update_id = update.get("update_id")
        try:
            await self._on_update(update)
        except Exception:  # one bad update must not stop the bot from receiving
            log.exception("[Telegram] Handing over update %s failed", update_id)
        if isinstance(update_id, int):
            self._offset = max(self._offset or 0, update_id + 1)

    async def _acknowledge(self) -> None:
        """Tell Telegram what was handed over since the last fetch, so a restart does not get it again."""
        if self._offset is None or self._offset == self._acknowledged:
            return
        try:
            await self._before_acknowledge()
            await asyncio.wait_for(
                self._backend.get_updates(self._offset, 0, self._allowed_updates, limit=1),
                ACKNOWLEDGE_TIMEOUT_SECONDS,
            )
        except (TelegramApiError, TimeoutError) as error:
            # Harmless: the updates come again after a restart and are recognised as seen.
            log.info("[Telegram] Could not acknowledge the last updates at stop: %s", error)

"""`SeenUpdates`: the update ids already handed over, kept on disk so a restart does not answer twice.

Telegram delivers an update again when the bot did not acknowledge it (a crash or restart between
receiving and the next getUpdates, a webhook answer that did not arrive). An update is marked the
moment it is handed to the bot, so it is answered at most once.

The file holds only numbers: the newest `capacity` update ids. Ids are increasing, so an id older than
everything remembered (once the window is full) counts as seen too. Writes are batched: long polling
`save`s before each getUpdates (which acknowledges what was handed over); otherwise (webhook) the file is
rewritten at most every `flush_delay` seconds while updates arrive, and on `close`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
from pathlib import Path

from bot.storage.files import read_text_sync, write_atomic

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 2000


class SeenUpdates:
    """A bounded, durable set of Telegram update ids."""

    def __init__(self, path: Path, capacity: int = DEFAULT_CAPACITY, flush_delay: float = 0.2) -> None:
        self._path = path
        self._capacity = capacity
        self._flush_delay = flush_delay
        self._ids: list[int] = []  # sorted
        self._dirty = False
        self._flusher: asyncio.Task[None] | None = None
        self._saving = asyncio.Lock()  # two saves racing could leave the older list on disk

    async def load(self) -> None:
        text = await asyncio.to_thread(read_text_sync, self._path)
        if text is None:
            return
        try:
            ids = json.loads(text)["seenUpdateIds"]
            self._ids = sorted({int(value) for value in ids})[-self._capacity :]
        except (ValueError, KeyError, TypeError) as error:
            log.warning(
                "[Telegram] Ignoring unreadable %s (%s); duplicates are not caught this once", self._path, error
            )

    def check_and_mark(self, update_id: int) -> bool:
        """True when `update_id` was seen before; otherwise remembers it and returns False."""
        index = bisect.bisect_left(self._ids, update_id)
        if index < len(self._ids) and self._ids[index] == update_id:
            return True
        if index == 0 and len(self._ids) >= self._capacity:
            return True  # older than the whole window
        self._ids.insert(index, update_id)
        if len(self._ids) > self._capacity:
            del self._ids[0]
        self._dirty = True
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())
        return False

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.save()

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._flush_delay)
        await self.save()

    async def save(self) -> None:
        """Write the ids marked since the last save (nothing when there are none)."""
        async with self._saving:
            if not self._dirty:
                return
            self._dirty = False
            payload = json.dumps({"seenUpdateIds": self._ids}).encode("utf-8")
            try:
                await write_atomic(self._path, payload)
            except OSError as error:
                self._dirty = True
                log.error("[Telegram] Could not save %s: %s", self._path, error)

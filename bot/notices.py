"""`OwnerNotices`: what the owner must hear about without asking, told once on their own chat.

Some things go wrong where nobody is looking: a key of runtime-config.json refused, a model whose real
window turned out smaller than believed, MEMORY.md grown past its share of the prompt. A log line alone
is silent for a person who talks to the bot on Telegram, so each of these is also told to the owner,
once per key: the keys already told are kept in the workspace (`state/owner-notices.json`), so a restart
does not repeat them. `settle(key)` forgets one once its cause is gone, so that it is told again if it
comes back.

Any layer may call `tell_once`: it never waits for the channel. Notices raised before the channels run
(while the configuration is first read) wait, and go out when the app connects the delivery; a notice
whose delivery fails stays waiting and goes out with the next one, or at the next start.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from bot.storage.files import read_state_sync, write_atomic_sync

log = logging.getLogger(__name__)

# Sends one notice to the owner; False when there is no owner to send to now.
DeliverToOwner = Callable[[str], Awaitable[bool]]


class OwnerNotices:
    """Notices to the owner, each key told once; `pending` are those not yet delivered."""

    def __init__(self, told_file: Path) -> None:
        self._told_file = told_file
        self._told: dict[str, str] = _read_told(told_file)
        self._pending: dict[str, str] = {}
        self._deliver: DeliverToOwner | None = None
        self._sending: asyncio.Task[None] | None = None

    def tell_once(self, key: str, text: str) -> None:
        """Tell the owner `text` unless `key` was told already (and not settled since)."""
        if key in self._told or key in self._pending:
            return
        log.info("[Notice] For the owner: %s", text.splitlines()[0] if text else key)
        self._pending[key] = text
        self._send_pending()

    def settle(self, key: str) -> None:
        """`key`'s cause is gone: forget it was told, so that it is told again if it comes back."""
        self._pending.pop(key, None)
        if self._told.pop(key, None) is not None:
            self._write_told()

    def keys(self, prefix: str = "") -> set[str]:
        """The keys told or waiting to be, that start with `prefix` (to settle those whose cause is gone)."""
        return {key for key in (*self._told, *self._pending) if key.startswith(prefix)}

    def pending(self) -> dict[str, str]:
        """The notices not delivered yet, by key."""
        return dict(self._pending)

    def connect(self, deliver: DeliverToOwner) -> None:
        """Start delivering (at the channels' start); notices raised before go out now."""
        self._deliver = deliver
        self._send_pending()

    async def close(self) -> None:
        """Wait (briefly, the caller bounds it) for a delivery on its way; the rest waits for the next start."""
        if self._sending is not None:
            await asyncio.shield(self._sending)
        self._deliver = None

    def _send_pending(self) -> None:
        if self._deliver is None or not self._pending:
            return
        if self._sending is not None and not self._sending.done():
            return  # the running round sends what was added meanwhile
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not running yet: `connect` sends them
        self._sending = loop.create_task(self._send_round(), name="owner notices")

    async def _send_round(self) -> None:
        while self._pending and self._deliver is not None:
            key, text = next(iter(self._pending.items()))
            try:
                delivered = await self._deliver(text)
            except Exception as error:
                log.warning("[Notice] Could not tell the owner (%s); kept for later: %s", key, error)
                return
            if not delivered:
                log.info("[Notice] No owner to tell yet (access.allowedUsers is empty); kept for later")
                return
            self._pending.pop(key, None)
            self._told[key] = datetime.now(UTC).isoformat(timespec="seconds")
            self._write_told()

    def _write_told(self) -> None:
        data = json.dumps(self._told, ensure_ascii=False, indent=1, sort_keys=True).encode()
        try:
            write_atomic_sync(self._told_file, data)
        except OSError as error:
            log.warning("[Notice] Could not keep %s (a restart may tell a notice again): %s", self._told_file, error)


def _read_told(path: Path) -> dict[str, str]:
    told = read_state_sync(path, "Notice", "notices may be told again")
    return {str(key): str(value) for key, value in told.items()}

"""`ChatDispatcher`: each chat's turns strictly in order, different chats concurrently.

Every chat with work gets one worker task that takes its queued turns one at a time; the task ends
when the queue is empty, so idle chats cost nothing. The turn being handled runs as its own task: when
it is cancelled (`/stop`), the turns queued behind it are still answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from bot.channels.base import Channel
from bot.ledger.turns import Turn

log = logging.getLogger(__name__)

Handler = Callable[[Turn, Channel], Coroutine[Any, Any, None]]
# The lock of a turn's chat, held while the turn runs.
ChatLock = Callable[[Turn], AbstractAsyncContextManager[object]]


@dataclass
class _ChatQueue:
    items: asyncio.Queue[tuple[Turn, Channel]] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None


class ChatDispatcher:
    """Queues turns per chat and runs `handler` on each, in arrival order."""

    def __init__(self, handler: Handler, chat_lock: ChatLock | None = None) -> None:
        self._handler = handler
        self.chat_lock = chat_lock
        self._chats: dict[str, _ChatQueue] = {}
        self._accepting = True
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, turn: Turn, channel: Channel) -> bool:
        """Queue a turn; returns False once the dispatcher is closing (nothing is taken then)."""
        if not self._accepting:
            return False
        session_id = turn.session_id
        chat = self._chats.get(session_id)
        if chat is None:
            chat = self._chats[session_id] = _ChatQueue()
        chat.items.put_nowait((turn, channel))
        if chat.worker is None:
            chat.worker = asyncio.create_task(self._work(session_id, chat), name=f"chat {session_id}")
        self._idle.clear()
        return True

    def pending(self, session_id: str) -> int:
        chat = self._chats.get(session_id)
        return 0 if chat is None else chat.items.qsize()

    def queue_depths(self) -> dict[str, int]:
        """Messages waiting or being answered, per chat with any."""
        return {session_id: chat.items.qsize() + (chat.current is not None) for session_id, chat in self._chats.items()}

    async def drain(self) -> None:
        """Wait until every queued message was handled."""
        await self._idle.wait()

    async def close(self, grace_seconds: float) -> None:
        """Stop taking messages, let runs in progress finish for up to `grace_seconds`, cancel the rest."""
        self._accepting = False
        try:
            await asyncio.wait_for(self.drain(), grace_seconds)
        except TimeoutError:
            workers = [chat.worker for chat in self._chats.values() if chat.worker is not None]
            log.warning("[Dispatcher] Cancelling %d chats still running after %.0f s", len(workers), grace_seconds)
            for worker in workers:
                worker.cancel()
            for worker in workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    async def _work(self, session_id: str, chat: _ChatQueue) -> None:
        try:
            while not chat.items.empty():
                turn, channel = chat.items.get_nowait()
                chat.current = asyncio.create_task(self._run(turn, channel))
                try:
                    await chat.current
                except asyncio.CancelledError:
                    if self._worker_is_cancelled():
                        raise
                    log.info("[Dispatcher] Run in %s interrupted", session_id)
                except Exception:
                    log.exception("[Dispatcher] Handling a message of %s failed", session_id)
                finally:
                    chat.current = None
        finally:
            del self._chats[session_id]
            if not self._chats:
                self._idle.set()

    async def _run(self, turn: Turn, channel: Channel) -> None:
        if self.chat_lock is None:
            await self._handler(turn, channel)
            return
        async with self.chat_lock(turn):
            await self._handler(turn, channel)

    @staticmethod
    def _worker_is_cancelled() -> bool:
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0

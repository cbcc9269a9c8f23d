"""Idle-session compaction: a chat quiet for `scheduler.idleCompactionMinutes` whose
conversation fills much of its room is compacted in the background, so its next message does not
wait for a compaction. Never while the chat has a run in progress or messages waiting."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from bot.compaction.service import CompactionService
from bot.domain.model import utc_now
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService

log = logging.getLogger(__name__)


class IdleCompactor:
    """Finds quiet, full chats and compacts them."""

    def __init__(
        self,
        sessions: SessionService,
        compaction: CompactionService,
        config_store: RuntimeConfigStore,
        chat_is_active: Callable[[str], bool],
    ) -> None:
        self._sessions = sessions
        self._compaction = compaction
        self._config_store = config_store
        self._chat_is_active = chat_is_active

    async def run(self, now: datetime | None = None) -> int:
        """Compact every chat that qualifies; returns how many were compacted."""
        config = await self._config_store.current()
        settings = config.scheduler
        if not config.compaction.enabled or settings.idle_compaction_minutes == 0:
            return 0
        quiet_since = (now or utc_now()) - timedelta(minutes=settings.idle_compaction_minutes)
        model = config.llm.model
        compacted = 0
        for session in self._sessions.cached():
            if session.updated_at > quiet_since or self._chat_is_active(session.id):
                continue
            lock = self._sessions.lock_for(session.id)
            if lock.locked():
                continue  # a run or a command holds it: never compete with the user
            async with lock:
                plan = self._compaction.planner.plan(session, model, config)
                if plan.message_tokens < settings.idle_compaction_fill_ratio * plan.room_for_messages:
                    continue
                event = await self._compaction.compact(
                    session, model, config, keep_messages=config.compaction.keep_last_messages
                )
            if event is not None:
                compacted += 1
                log.info("[AutoCompact] Compacted idle %s (%d tokens of %d)", session.id,
                         plan.message_tokens, plan.room_for_messages)  # fmt: skip
        return compacted

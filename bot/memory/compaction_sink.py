"""`PreCompactionMemory`: the compaction's pre-compaction sink: turns about to leave the live session
reach structured memory first (see `CompactionService.set_pre_compaction_sink`)."""

from __future__ import annotations

from bot.domain.message import Message, Role
from bot.memory.service import MemoryService
from bot.runtime_config import RuntimeConfigStore


def pair_turns(messages: list[Message]) -> list[tuple[Message, Message]]:
    """Each user message with the assistant's text answer that followed it (tool steps skipped)."""
    turns: list[tuple[Message, Message]] = []
    pending: Message | None = None
    for message in messages:
        if message.role is Role.USER:
            pending = message
        elif message.role is Role.ASSISTANT and message.content and pending is not None:
            turns.append((pending, message))
            pending = None
    return turns


class PreCompactionMemory:
    """Records the turns of messages about to be compacted that memory has not seen yet."""

    def __init__(self, memory: MemoryService, config_store: RuntimeConfigStore) -> None:
        self._memory = memory
        self._config_store = config_store

    async def remember_before_compaction(self, session_id: str, messages: list[Message]) -> bool:
        config = (await self._config_store.current()).memory
        if not config.enabled:
            return False
        await self._memory.record_missing_turns(config, session_id, pair_turns(messages))
        return True

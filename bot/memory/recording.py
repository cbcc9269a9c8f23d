"""`TurnRecorder`: what a finished turn leaves in memory, and taking it back.

A turn writes its line in today's daily note and its structured items: the episodic item of the
exchange and what extraction found in it (the rules, or the model when `memory.llmExtractionEnabled`;
in a group, each statement in its speaker's name). The items' vectors are made later, when the bot is
idle (`bot.memory.indexing`). An exchange that /retry or /undo drops is taken back; the turns a
compaction is about to take out of a session are recorded first if no item refers to them yet.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import date

from bot.clock import Clock
from bot.domain.memory import TurnMemoryEvent
from bot.domain.message import Message
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.memory.extraction import MemoryCandidate, RuleBasedExtractor
from bot.memory.indexing import VectorIndexing
from bot.memory.llm_extraction import LlmMemoryExtractor
from bot.memory.scopes import MemoryScope, MemoryScopes
from bot.memory.write_service import WriteReport
from bot.settings import MemoryConfig

log = logging.getLogger(__name__)


class TurnRecorder:
    """Writes finished turns to a scope's daily notes and items, and takes a dropped one back."""

    def __init__(
        self, clock: Clock, llm: LlmClient, scopes: MemoryScopes, indexing: VectorIndexing, embedders: Embedders
    ) -> None:
        self._clock = clock
        self._llm = llm
        self._scopes = scopes
        self._indexing = indexing
        self._embedders = embedders
        self._rules = RuleBasedExtractor()

    async def append_daily_note(self, scope: MemoryScope, event: TurnMemoryEvent) -> str:
        """The exchange's line in today's daily note."""
        return await scope.notes.append(event.timestamp, event.user_text, event.assistant_text)

    async def record_turn(
        self,
        scope: MemoryScope,
        config: MemoryConfig,
        event: TurnMemoryEvent,
        previous_assistant_text: str = "",
        model: str = "",
    ) -> WriteReport:
        """The structured write of a finished turn: the episodic item and what extraction found."""
        candidates, search_keys = await self._extract(config, event, previous_assistant_text, model)
        if event.speaker:
            candidates = [attributed(candidate, event.speaker) for candidate in candidates]
        async with self._scopes.fresh(scope):
            report = scope.writer.record_turn(event, candidates, config, search_keys)
        await scope.store.flush(durable=False)
        embedder = self._embedders.get(config.embeddings_model)
        if embedder is not None:
            self._indexing.start(scope, embedder)  # made when the bot is idle
        return report

    async def retract_turn(self, scope: MemoryScope, event: TurnMemoryEvent, days: list[date]) -> WriteReport:
        """Take back what `append_daily_note` and `record_turn` wrote for `event`, an exchange /retry or
        /undo dropped: its daily-note line (looked for in `days`) and the items made or reinforced by it."""
        references = [ref for ref in (event.user_message_id, event.assistant_message_id) if ref]
        note_removed = await scope.notes.remove_exchange(days, event.user_text, event.assistant_text)
        async with self._scopes.fresh(scope):
            report = scope.writer.retract(references)
        await scope.store.flush()
        log.info(
            "[Memory] Took back a dropped exchange of %s: note line %s, %d items removed, %d weakened",
            event.session_id,
            "removed" if note_removed else "not found",
            len(report.added),
            len(report.reinforced),
        )
        return report

    async def record_missing_turns(
        self, scope: MemoryScope, config: MemoryConfig, session_id: str, turns: list[tuple[Message, Message]]
    ) -> int:
        """Record the (user, assistant) turns no item refers to yet; returns how many were recorded.

        Before a compaction takes messages out of the live session, this makes sure each of them
        reached structured memory (a turn may have been missed while memory was off or a write failed).
        """
        recorded = 0
        async with self._scopes.fresh(scope):
            missing = [(user, answer) for user, answer in turns if not scope.store.is_referenced(user.id)]
            for user, answer in missing:
                event = TurnMemoryEvent(
                    session_id,
                    user.content,
                    answer.content,
                    user.timestamp.astimezone(self._clock.zone),
                    user.id,
                    answer.id,
                )
                extracted = self._rules.extract(event, code_aware=config.code_aware_extraction_enabled)
                scope.writer.record_turn(event, extracted, config)
                recorded += 1
        await scope.store.flush()
        if recorded:
            log.info("[Memory] Recorded %d turns of %s before compaction", recorded, session_id)
        return recorded

    async def _extract(
        self, config: MemoryConfig, event: TurnMemoryEvent, previous_assistant_text: str, model: str
    ) -> tuple[list[MemoryCandidate], tuple[str, ...]]:
        """What to remember of the exchange, and the search keys of its own item (the model's alone: the
        rules' facts are the exchange's own words)."""
        code_aware = config.code_aware_extraction_enabled
        if config.llm_extraction_enabled and model:
            extracted = await LlmMemoryExtractor(self._llm, model).extract(event)
            if extracted is not None:
                procedures = self._rules.extract(
                    dataclasses.replace(event, user_text=""),
                    code_aware=code_aware,
                    previous_assistant_text=previous_assistant_text,
                )
                return extracted.candidates + procedures, extracted.search_keys
        rules = self._rules.extract(event, code_aware=code_aware, previous_assistant_text=previous_assistant_text)
        return rules, ()


def attributed(candidate: MemoryCandidate, speaker: str) -> MemoryCandidate:
    """`candidate` as said by `speaker`: "Name: content", and its slot the speaker's own ("Name: lives in")."""
    prefix = f"{speaker}: "
    content = candidate.content if candidate.content.startswith(prefix) else prefix + candidate.content
    key = None if candidate.key is None else prefix + candidate.key
    return dataclasses.replace(candidate, content=content, key=key)

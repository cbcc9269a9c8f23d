"""`MemoryWriteService`: every change to the structured items: turns, facts, dedup, supersede,
promotion, decay, pins and forgetting.

- The same content twice (same fingerprint) is one item whose confidence rises by
  `REINFORCEMENT_STEP`, not two items.
- A new fact filling the same slot (`key`) as an older, different one supersedes it: the old item
  stays in its file with `supersededBy` and is no longer retrieved.
- An EPISODIC fact whose confidence reaches `promotionMinConfidence` moves to SEMANTIC (same id).
- Salience halves for items unused for `decayDays` (at most once per `decayDays` per item).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bot.domain.memory import MemoryItem, MemoryLayer, TurnMemoryEvent
from bot.domain.text import fingerprint_of, normalized_words
from bot.memory.daily_notes import one_line
from bot.memory.extraction import MemoryCandidate
from bot.memory.item_storage import ItemStore
from bot.memory.search_keys import unique_keys
from bot.settings import MemoryConfig

log = logging.getLogger(__name__)

REINFORCEMENT_STEP = 0.15
DECAY_FACTOR = 0.5
TURN_USER_LIMIT = 300
TURN_ASSISTANT_LIMIT = 500
TURN_CONFIDENCE = 1.0
TURN_SALIENCE = 0.4
PROMOTED_TAG = "promoted"
# Shorter contents ("ok") are too common to remove every exchange that contains them.
MIN_TRACE_CHARS = 8
# An exchange said again gathers the keys of each time, up to this many (one extraction gives at most 22).
MAX_SEARCH_KEYS = 32


def turn_content(event: TurnMemoryEvent) -> str:
    user = one_line(event.user_text, TURN_USER_LIMIT)
    assistant = one_line(event.assistant_text, TURN_ASSISTANT_LIMIT)
    return f"User: {user} | Assistant: {assistant}"


@dataclass
class WriteReport:
    """What one write did, for the log line and the tests."""

    added: list[MemoryItem] = field(default_factory=list)
    reinforced: list[MemoryItem] = field(default_factory=list)
    superseded: list[MemoryItem] = field(default_factory=list)
    promoted: list[MemoryItem] = field(default_factory=list)

    def merge(self, other: WriteReport) -> None:
        self.added += other.added
        self.reinforced += other.reinforced
        self.superseded += other.superseded
        self.promoted += other.promoted

    def describe(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.reinforced)} reinforced, "
            f"{len(self.superseded)} superseded, {len(self.promoted)} promoted"
        )


class UnknownMemoryItem(KeyError):
    """No active item has the given id."""


class MemoryWriteService:
    """Changes one memory scope's items in memory; callers hold the scope's lock and then `flush` the store."""

    def __init__(self, store: ItemStore) -> None:
        self._store = store

    def record_turn(
        self,
        event: TurnMemoryEvent,
        candidates: list[MemoryCandidate],
        config: MemoryConfig,
        search_keys: tuple[str, ...] = (),
    ) -> WriteReport:
        """The turn as an EPISODIC item found also by `search_keys`, and every candidate extracted from it."""
        references = [ref for ref in (event.user_message_id, event.assistant_message_id) if ref]
        turn = MemoryCandidate(
            MemoryLayer.EPISODIC, "turn", turn_content(event), TURN_CONFIDENCE, TURN_SALIENCE, search_keys=search_keys
        )
        report = self.add(turn, event.session_id, event.timestamp, config, references, tags=event.tool_names)
        for candidate in candidates:
            skill = (event.skill,) if event.skill and candidate.layer is MemoryLayer.PROCEDURAL else ()
            report.merge(self.add(candidate, event.session_id, event.timestamp, config, references, tags=skill))
        return report

    def add(
        self,
        candidate: MemoryCandidate,
        source: str,
        now: datetime,
        config: MemoryConfig,
        references: list[str] | None = None,
        tags: tuple[str, ...] = (),
    ) -> WriteReport:
        """Add `candidate`, or reinforce the item that already says the same."""
        report = WriteReport()
        fingerprint = fingerprint_of(candidate.content)
        existing = self._store.find_by_fingerprint(fingerprint)
        if existing is not None:
            reinforced = existing.model_copy(
                update={
                    "confidence": min(1.0, existing.confidence + REINFORCEMENT_STEP),
                    "salience": max(existing.salience, candidate.salience),
                    "updated_at": now,
                    "references": _merged(existing.references, references or []),
                    "tags": _merged(existing.tags, [*candidate.tags, *tags]),
                    "search_keys": unique_keys([*existing.search_keys, *candidate.search_keys])[:MAX_SEARCH_KEYS],
                }
            )
            self._store.replace([reinforced])
            report.reinforced.append(reinforced)
            if self._promotable(reinforced, config):
                report.promoted.append(self._promote(reinforced, now))
            return report
        item = MemoryItem(
            layer=candidate.layer,
            type=candidate.type,
            content=candidate.content,
            created_at=now,
            updated_at=now,
            confidence=candidate.confidence,
            salience=candidate.salience,
            tags=_merged([], [*candidate.tags, *tags]),
            references=list(references or []),
            fingerprint=fingerprint,
            source=source,
            key=candidate.key,
            search_keys=list(candidate.search_keys),
        )
        report.superseded = self._supersede_slot(item, now)
        self._store.append([item])
        report.added.append(item)
        return report

    def _supersede_slot(self, newer: MemoryItem, now: datetime) -> list[MemoryItem]:
        if not newer.key:
            return []
        older = [
            item
            for layer in (MemoryLayer.SEMANTIC, MemoryLayer.EPISODIC)
            for item in self._store.find_by_key(newer.key, layer)
            if item.fingerprint != newer.fingerprint
        ]
        marked = [item.model_copy(update={"superseded_by": newer.id, "updated_at": now}) for item in older]
        if marked:
            self._store.replace(marked)
            log.info("[Memory] %d items superseded by %s (%s)", len(marked), newer.id, newer.key)
        return marked

    def _promotable(self, item: MemoryItem, config: MemoryConfig) -> bool:
        return (
            config.promotion_enabled
            and item.layer is MemoryLayer.EPISODIC
            and item.type != "turn"
            and item.confidence >= config.promotion_min_confidence
        )

    def _promote(self, item: MemoryItem, now: datetime) -> MemoryItem:
        promoted = item.model_copy(
            update={"layer": MemoryLayer.SEMANTIC, "updated_at": now, "tags": _merged(item.tags, [PROMOTED_TAG])}
        )
        self._store.relocate(promoted)
        log.info("[Memory] Promoted %s to SEMANTIC (confidence %.2f)", item.id, item.confidence)
        return promoted

    # -- maintenance (the nightly job) --------------------------------------------------------------

    def promote_due(self, now: datetime, config: MemoryConfig) -> int:
        """Promote every episodic fact already confident enough (a lowered threshold, a hand edit)."""
        due = [
            item
            for item in self._store.in_layer(MemoryLayer.EPISODIC)
            if item.active and self._promotable(item, config)
        ]
        for item in due:
            self._promote(item, now)
        return len(due)

    def merge_duplicates(self, now: datetime) -> int:
        """One item per fingerprint and layer (hand edits can copy lines): the oldest stays, reinforced."""
        groups: dict[tuple[MemoryLayer, str], list[MemoryItem]] = {}
        for item in self._store.items():
            if item.active:
                groups.setdefault((item.layer, item.fingerprint), []).append(item)
        merged = 0
        for duplicates in groups.values():
            if len(duplicates) < 2:
                continue
            keeper, *others = sorted(duplicates, key=lambda item: (item.created_at, item.id))
            references = keeper.references
            for other in others:
                references = _merged(references, other.references)
            confidence = min(1.0, keeper.confidence + REINFORCEMENT_STEP * len(others))
            self._store.replace([keeper.model_copy(update={"confidence": confidence, "references": references,
                                                           "updated_at": now})])  # fmt: skip
            self._store.remove([other.id for other in others])
            merged += len(others)
        return merged

    def drop_old_history(self, now: datetime, keep_days: int) -> int:
        """Remove superseded items older than `keep_days` (0 keeps history forever)."""
        if keep_days == 0:
            return 0
        cutoff = now - timedelta(days=keep_days)
        old = [item.id for item in self._store.items() if not item.active and item.updated_at < cutoff]
        if old:
            self._store.remove(old)
        return len(old)

    # -- explicit changes (tools, /memory) ----------------------------------------------------------

    def _active(self, item_id: str) -> MemoryItem:
        item = self._store.get(item_id)
        if item is None or not item.active:
            raise UnknownMemoryItem(item_id)
        return item

    def update(self, item_id: str, content: str, now: datetime) -> MemoryItem:
        """New content for an item; the old version is kept as superseded history."""
        old = self._active(item_id)
        newer = MemoryItem(
            layer=old.layer,
            type=old.type,
            content=content.strip(),
            created_at=now,
            updated_at=now,
            confidence=max(old.confidence, 0.9),
            salience=old.salience,
            tags=old.tags,
            references=old.references,
            fingerprint=fingerprint_of(content),
            source=old.source,
            key=old.key,
            pinned=old.pinned,
            shared=old.shared,
        )
        self._store.replace([old.model_copy(update={"superseded_by": newer.id, "updated_at": now})])
        self._store.append([newer])
        return newer

    def promote(self, item_id: str, now: datetime) -> MemoryItem:
        item = self._active(item_id)
        if item.layer is not MemoryLayer.EPISODIC:
            return item
        return self._promote(item.model_copy(update={"confidence": max(item.confidence, 0.8)}), now)

    def retract(self, references: list[str]) -> WriteReport:
        """Take back what the exchange of these message ids wrote (it was dropped by /retry or /undo).

        An item made from it alone goes, and the items it superseded are current again; an item it
        only reinforced keeps its other references and loses that reinforcement. Returns what was
        removed (`added`: it is no longer) and weakened (`reinforced`).
        """
        dropped = set(references)
        report = WriteReport()
        gone: list[str] = []
        changed: list[MemoryItem] = []
        for item in self._store.referring_to(dropped):
            kept = [reference for reference in item.references if reference not in dropped]
            if kept:
                confidence = max(0.0, item.confidence - REINFORCEMENT_STEP)
                weakened = item.model_copy(update={"references": kept, "confidence": confidence})
                changed.append(weakened)
                report.reinforced.append(weakened)
                continue
            gone.append(item.id)
            changed += [older.model_copy(update={"superseded_by": None}) for older in self._store.superseded_by(item)]
        if changed:
            self._store.replace(changed)
        if gone:
            report.added = self._store.remove(gone)
        return report

    def forget(self, item_id: str) -> list[MemoryItem]:
        """Remove the item from its file (atomic rewrite) and from every index; returns what was removed,
        the item first.

        The recorded exchanges that contain it go too: forgetting "the lock code is 4242" must not
        leave the turn where it was said to bring it back into a prompt. So do those it is a search key of
        (the exchange the model drew it from), which would bring it back by its very words.
        """
        item = self._active(item_id)
        traces = [
            other.id
            for other in self._store.items()
            if other.id != item_id
            and other.layer is MemoryLayer.EPISODIC
            and (_contains(other.content, item.content) or _keyed_by(other, item))
        ]
        removed = self._store.remove([item_id, *traces])
        if traces:
            log.info("[Memory] Forgot %s and %d exchanges that contained it", item_id, len(traces))
        return removed

    def pin(self, item_id: str, now: datetime, pinned: bool = True) -> MemoryItem:
        item = self._active(item_id)
        changed = item.model_copy(update={"pinned": pinned, "updated_at": now})
        self._store.replace([changed])
        return changed

    def share(self, item_id: str, now: datetime, shared: bool = True) -> MemoryItem:
        """Mark an item shared with every chat (or take the mark back): see `bot.memory.audience`."""
        item = self._active(item_id)
        changed = item.model_copy(update={"shared": shared, "updated_at": now})
        self._store.replace([changed])
        return changed

    def decay(self, now: datetime, config: MemoryConfig, accessed: dict[str, datetime]) -> int:
        """Record last uses, and halve the salience of items unused for `decayDays`; returns how many decayed."""
        period = timedelta(days=config.decay_days)
        changed: list[MemoryItem] = []
        decayed = 0
        for item in list(self._store.items()):
            update: dict[str, object] = {}
            used = accessed.get(item.id)
            if used is not None and (item.last_accessed_at is None or used > item.last_accessed_at):
                update["last_accessed_at"] = used
            last_used = max(item.last_used_at, used or item.last_used_at)
            due = item.decayed_at is None or now - item.decayed_at >= period
            if config.decay_enabled and item.active and not item.pinned and now - last_used >= period and due:
                update["salience"] = round(item.salience * DECAY_FACTOR, 4)
                update["decayed_at"] = now
                decayed += 1
            if update:
                changed.append(item.model_copy(update=update))
        if changed:
            self._store.replace(changed)
        return decayed


def _contains(text: str, part: str) -> bool:
    needle = normalized_words(part)
    return len(needle) >= MIN_TRACE_CHARS and needle in normalized_words(text)


def _keyed_by(exchange: MemoryItem, fact: MemoryItem) -> bool:
    """Whether the exchange's search keys hold the fact's sentence (as the model wrote it: without the name of
    the speaker it was recorded under in a group)."""
    if not exchange.search_keys:
        return False
    speaker = fact.speaker
    wanted = normalized_words(fact.content.removeprefix(f"{speaker}: ") if speaker else fact.content)
    return any(normalized_words(key) == wanted for key in exchange.search_keys)


def _merged(first: list[str], second: list[str] | tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))

"""`ItemQueries`: the lookups of `MemoryItemStore`, read from the index database.

Items are parsed from their rows on demand (`ItemCaches` keeps the recently used ones). Retrieval needs
few of them parsed: it ranks candidates by their facts (layer, day, speaker, salience ...) and the turns
around them, kept in RAM for every item as columns (`FactsTable`), and the pack parses only what it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from collections.abc import Set as AbstractSet
from datetime import datetime
from pathlib import Path

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory import index_sql
from bot.memory.index_database import IndexDatabase
from bot.memory.item_caches import ItemCaches
from bot.memory.item_state import ItemRows

# Rows parsed at a time when every item is streamed (start-up, `items()`): bounds the memory it takes.
STREAM_BATCH = 2000


class ItemQueries:
    """Every read of the items of one scope (the scope's lock is held by the caller)."""

    def __init__(self, db: IndexDatabase, rows: ItemRows, caches: ItemCaches) -> None:
        self._db = db
        self._rows = rows
        self._caches = caches

    def stream(self, active: bool | None = None, layer: MemoryLayer | None = None) -> Iterator[list[MemoryItem]]:
        """Items of every row (`active` True: the active ones, False: the inactive ones; `layer`: the active
        ones of it), parsed a batch at a time (in row order, changes tolerated)."""
        last = 0
        while True:
            rows = self._db.read(
                index_sql.lines_after, last, STREAM_BATCH, active, None if layer is None else layer.value
            )
            if not rows:
                return
            last = rows[-1][0]
            yield [self._rows.parse(line) for _, line in rows]

    def _items_from(self, rows: Iterable[index_sql.ItemLine]) -> list[MemoryItem]:
        caches = self._caches
        found = []
        for item_id, line in rows:
            item = caches.item(item_id)
            if item is None:
                item = caches.remember(self._rows.parse(line))
            found.append(item)
        return found

    def get(self, item_id: str) -> MemoryItem | None:
        item = self._caches.item(item_id)
        if item is not None:
            return item
        line = self._db.read(index_sql.line_of, item_id)
        return None if line is None else self._caches.remember(self._rows.parse(line))

    def file_of(self, item_id: str) -> Path | None:
        """The file a stored item is in (None: not stored)."""
        place = self._db.read(index_sql.place_of, item_id)
        return None if place is None else self._rows.path_of(place[0])

    def get_many(self, item_ids: Iterable[str]) -> dict[str, MemoryItem]:
        """The stored items of `item_ids` in that order (those not stored are left out), in a few queries."""
        wanted = list(dict.fromkeys(item_ids))
        # Taken from the cache first: parsing the others adds them to it, which may push these out.
        found = {item_id: item for item_id in wanted if (item := self._caches.item(item_id)) is not None}
        missing = [item_id for item_id in wanted if item_id not in found]
        if missing:
            found.update((item.id, item) for item in self._items_from(self._db.read(index_sql.lines_of, missing)))
        return {item_id: found[item_id] for item_id in wanted if item_id in found}

    def items(self) -> Iterable[MemoryItem]:
        """Every item, active or not (read from the database a batch at a time)."""
        for batch in self.stream():
            yield from batch

    def in_layer(self, layer: MemoryLayer) -> list[MemoryItem]:
        """Active items of one layer (EPISODIC means every day file: prefer `recent_episodic`)."""
        return [item for batch in self.stream(layer=layer) for item in batch]

    def recently_updated(self, limit: int) -> list[MemoryItem]:
        """The `limit` active items changed last, newest first."""
        return self._items_from(self._db.read(index_sql.recently_updated, limit))

    def newest_in_layer(self, layer: MemoryLayer, limit: int) -> list[MemoryItem]:
        """The `limit` active items of one layer changed last, newest first."""
        return list(self.get_many(self._db.read(index_sql.newest_ids_in_layer, layer.value, limit)).values())

    def superseded(self) -> list[MemoryItem]:
        """Every item a newer version replaced (kept for history)."""
        return [item for batch in self.stream(active=False) for item in batch]

    def count_by_layer(self) -> dict[MemoryLayer, int]:
        counts = dict.fromkeys(MemoryLayer, 0)
        for layer, count in self._db.read(index_sql.count_by_layer):
            counts[MemoryLayer(layer)] = count
        return counts

    def find_by_fingerprint(self, fingerprint: str, layer: MemoryLayer | None = None) -> MemoryItem | None:
        """The active item with this fingerprint (in `layer`, when given)."""
        row = self._db.read(index_sql.by_fingerprint, fingerprint, None if layer is None else layer.value)
        return None if row is None else self._items_from([row])[0]

    def find_by_key(self, key: str, layer: MemoryLayer) -> list[MemoryItem]:
        """The active items filling the slot `key` in `layer`."""
        return self._items_from(self._db.read(index_sql.active_in_slot, key, layer.value))

    def superseded_by(self, newer: MemoryItem) -> list[MemoryItem]:
        """The items `newer` superseded (they shared its slot)."""
        if not newer.key:
            return []
        rows = self._db.read(index_sql.inactive_in_slot, newer.key)
        return [item for item in self._items_from(rows) if item.superseded_by == newer.id]

    def referring_to(self, references: Iterable[str]) -> list[MemoryItem]:
        """The active items that refer to any of `references` (message ids)."""
        return list(self.get_many(self.ids_referring_to(references)).values())

    def ids_referring_to(self, references: Iterable[str]) -> list[str]:
        """The ids of the active items that refer to any of `references` (without parsing them)."""
        wanted = list(dict.fromkeys(references))
        return self._db.read(index_sql.ids_referring_to, wanted) if wanted else []

    def referring_among(self, item_ids: Collection[str], references: AbstractSet[str]) -> set[str]:
        """Those of `item_ids` that refer to any of `references` (message ids), read through whichever of
        the two is shorter: a long live conversation has many more ids than a message has candidates."""
        if len(references) <= len(item_ids):
            return set(self.ids_referring_to(references)) & set(item_ids)
        if not item_ids:
            return set()
        return {item_id for item_id, ref in self._db.read(index_sql.refs_of, list(item_ids)) if ref in references}

    def is_referenced(self, reference: str) -> bool:
        """Whether an active item refers to `reference` (a message id)."""
        return self._db.read(index_sql.is_referenced, reference)

    def core(self, limit: int) -> list[MemoryItem]:
        """The `limit` most salient (then newest) active SEMANTIC items of salience at least `CORE_SALIENCE`."""
        key = ("core", limit)
        kept = self._caches.chosen(key)
        if kept is not None:
            return kept
        return self._caches.keep_chosen(key, self._items_from(self._db.read(index_sql.core, limit)))

    def pinned(self) -> list[MemoryItem]:
        kept = self._caches.chosen("pinned")
        if kept is not None:
            return kept
        return self._caches.keep_chosen("pinned", self._items_from(self._db.read(index_sql.pinned)))

    def shared(self) -> list[MemoryItem]:
        """The active items the owner shared with every chat (`/memory share ID`), oldest first."""
        kept = self._caches.chosen("shared")
        if kept is not None:
            return kept
        found = self._items_from(self._db.read(index_sql.shared))
        found.sort(key=lambda item: item.created_at)
        return self._caches.keep_chosen("shared", found)

    def speakers_among(self, names: Iterable[str]) -> set[str]:
        """Those of `names` that speak in some active item (see `MemoryItem.speaker`)."""
        return {name for name in names if self._caches.facts.speaks(name)}

    def recent_episodic(self, limit: int, since: datetime, skip: Callable[[str], bool]) -> list[MemoryItem]:
        """The newest active EPISODIC items created since `since`, newest first, reading day files from the
        latest back, less those whose id `skip` says (the live conversation's own items, say).

        Ids are read first, a growing batch at a time, and only the items kept are parsed: in a long live
        conversation the newest hundreds of items are all of it, and are passed over unread."""
        found: list[str] = []
        offset = 0
        batch = max(2 * limit, 16)
        # The day files from `since`'s on: a range of the index, so a memory whose newest items are older
        # than `since` is not scanned to its end to find none.
        first_file = self._rows.name(self._rows.paths.episodic_file(since.astimezone(self._rows.zone).date()))
        while len(found) < limit:
            ids = self._db.read(index_sql.recent_episodic_ids, first_file, since.timestamp(), batch, offset)
            found += [item_id for item_id in ids if not skip(item_id)][: limit - len(found)]
            if len(ids) < batch:
                break
            offset += batch
            batch *= 4
        return list(self.get_many(found).values())

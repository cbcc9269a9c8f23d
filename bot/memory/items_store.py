"""`MemoryItemStore`: the JSONL files of `memory/items/` are the only store; this is their live view.

Each layer has its files (docs/memory.md): `episodic/YYYY-MM-DD.jsonl` (the day the item was made, in the
bot's time zone), `semantic.jsonl`, `procedural.jsonl`. Indexes subscribe as `ItemIndex` and are told
of every item added or removed.

What was read is kept in an index database beside the files (`index/items.sqlite3`, SQLite from the
standard library), not in RAM: one row per item (its line, and the columns that lookups and retrieval
need), the lines kept without being items, and each file's signature. The store is a facade over one
module per concern:

- `index_database` and `index_sql`: the connection, and every statement and the schema;
- `item_reconciler`: the files read into the database when they change (hand edits, bad lines kept);
- `item_caches`: the version, the append log and what is kept in RAM (parsed items, every item's facts:
  `item_facts`);
- `item_queries`: the lookups;
- `item_writes`: append, replace, relocate, remove, and the flush that writes them to the files.

Reads and changes are serialised by `MemoryScope.lock`; the database connection is also guarded by its
own lock, since a flush reads it outside the scope's lock. It implements `ItemStore`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable
from collections.abc import Set as AbstractSet
from datetime import datetime, tzinfo
from pathlib import Path

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME, IndexDatabase
from bot.memory.item_caches import ItemCaches
from bot.memory.item_facts import FactsTable
from bot.memory.item_queries import ItemQueries
from bot.memory.item_reconciler import ItemReconciler
from bot.memory.item_state import ItemRows, StoreState
from bot.memory.item_storage import ItemIndex
from bot.memory.item_writes import ItemWrites
from bot.storage.durability import DeferredSync
from bot.storage.folder_changes import FolderChanges
from bot.workspace import MemoryPaths

log = logging.getLogger(__name__)


class MemoryItemStore:
    """Every item of one memory scope, kept in step with its files (rows in the index database)."""

    def __init__(
        self,
        paths: MemoryPaths,
        zone: tzinfo,
        deferred: DeferredSync | None = None,
        changes: FolderChanges | None = None,
    ) -> None:
        """`deferred`: where an append of new items leaves its fsync (`ItemWrites`). `changes`: which item
        files changed since the last check (without it, each check `stat`s them all)."""
        self.paths = paths
        self._db = IndexDatabase(paths.index_dir / INDEX_FILE_NAME, zone)
        self._caches = ItemCaches()
        rows = ItemRows(paths, zone)
        self._state = StoreState(self._db, rows, self._caches)
        self._queries = ItemQueries(self._db, rows, self._caches)
        self._reconciler = ItemReconciler(self._state, self._queries, changes)
        self._writes = ItemWrites(self._state, self._queries, deferred)

    # -- following changes ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Bumped by every change of the items."""
        return self._caches.version

    def appended_since(self, version: int) -> list[str] | None:
        """The ids of the items added since `version` when nothing else changed meanwhile; None otherwise (a
        change, a re-read file, or a version too old to know)."""
        return self._caches.appended_since(version)

    def subscribe(self, index: ItemIndex) -> None:
        """Keep `index` in step from now on (it is given every item already loaded)."""
        self._state.indexes.append(index)
        if self._state.fed:
            self._reconciler.feed([index])

    async def refresh(self) -> None:
        """Nothing to do: every change is in the files, which `refresh_sync` reads."""

    def refresh_sync(self) -> bool:
        """Re-read every file that changed on disk since last seen; True when anything changed."""
        return self._reconciler.refresh_sync()

    @property
    def skipped_lines(self) -> int:
        """Lines of the item files that are not valid items (kept in their files, left out of memory)."""
        return self._reconciler.skipped_lines

    @property
    def files_read(self) -> int:
        """How many times a file was read and parsed (a restart with an up-to-date index reads none)."""
        return self._reconciler.files_read

    def close(self) -> None:
        """Close the index database (the store reopens it when used again)."""
        if self._state.written and not self._db.broken:
            try:
                self._state.transaction(lambda _: None)  # records what was written since the last transaction
            except sqlite3.DatabaseError as error:  # the files are re-read at the next start
                log.warning("[Memory] Could not record the item files written in %s: %s", self._db.path, error)
        self._db.close()

    # -- reading -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._state.count

    def get(self, item_id: str) -> MemoryItem | None:
        return self._queries.get(item_id)

    def get_many(self, item_ids: Iterable[str]) -> dict[str, MemoryItem]:
        """The stored items of `item_ids` in that order (those not stored are left out), in a few queries."""
        return self._queries.get_many(item_ids)

    def items(self) -> Iterable[MemoryItem]:
        """Every item, active or not (read from the database a batch at a time)."""
        return self._queries.items()

    def in_layer(self, layer: MemoryLayer) -> list[MemoryItem]:
        """Active items of one layer (EPISODIC means every day file: prefer `recent_episodic`)."""
        return self._queries.in_layer(layer)

    def recently_updated(self, limit: int) -> list[MemoryItem]:
        """The `limit` active items changed last, newest first."""
        return self._queries.recently_updated(limit)

    def recent_episodic(self, limit: int, since: datetime, skip: Callable[[str], bool]) -> list[MemoryItem]:
        """The newest active EPISODIC items created since `since`, newest first (`ItemQueries.recent_episodic`)."""
        return self._queries.recent_episodic(limit, since, skip)

    def newest_in_layer(self, layer: MemoryLayer, limit: int) -> list[MemoryItem]:
        """The `limit` active items of one layer changed last, newest first."""
        return self._queries.newest_in_layer(layer, limit)

    def superseded(self) -> list[MemoryItem]:
        """Every item a newer version replaced (kept for history)."""
        return self._queries.superseded()

    def count_by_layer(self) -> dict[MemoryLayer, int]:
        return self._queries.count_by_layer()

    def find_by_fingerprint(self, fingerprint: str, layer: MemoryLayer | None = None) -> MemoryItem | None:
        """The active item with this fingerprint (in `layer`, when given)."""
        return self._queries.find_by_fingerprint(fingerprint, layer)

    def find_by_key(self, key: str, layer: MemoryLayer) -> list[MemoryItem]:
        """The active items filling the slot `key` in `layer`."""
        return self._queries.find_by_key(key, layer)

    def superseded_by(self, newer: MemoryItem) -> list[MemoryItem]:
        """The items `newer` superseded (they shared its slot)."""
        return self._queries.superseded_by(newer)

    def referring_to(self, references: Iterable[str]) -> list[MemoryItem]:
        """The active items that refer to any of `references` (message ids)."""
        return self._queries.referring_to(references)

    def ids_referring_to(self, references: Iterable[str]) -> list[str]:
        """The ids of the active items that refer to any of `references` (without parsing them)."""
        return self._queries.ids_referring_to(references)

    def referring_among(self, item_ids: Collection[str], references: AbstractSet[str]) -> set[str]:
        """Those of `item_ids` that refer to any of `references` (message ids)."""
        return self._queries.referring_among(item_ids, references)

    def is_referenced(self, reference: str) -> bool:
        """Whether an active item refers to `reference` (a message id)."""
        return self._queries.is_referenced(reference)

    def core(self, limit: int) -> list[MemoryItem]:
        """The `limit` most salient (then newest) active SEMANTIC items of salience at least `CORE_SALIENCE`."""
        return self._queries.core(limit)

    def pinned(self) -> list[MemoryItem]:
        return self._queries.pinned()

    def shared(self) -> list[MemoryItem]:
        """The active items the owner shared with every chat (`/memory share ID`), oldest first."""
        return self._queries.shared()

    def speakers_among(self, names: Iterable[str]) -> set[str]:
        """Those of `names` that speak in some active item (see `MemoryItem.speaker`)."""
        return self._queries.speakers_among(names)

    @property
    def facts_table(self) -> FactsTable:
        """Every item's facts as columns (no line is parsed)."""
        return self._caches.facts

    # -- writing -------------------------------------------------------------------------------------

    def file_for(self, item: MemoryItem) -> Path:
        """The file a new item belongs in."""
        return self._state.rows.file_for(item)

    def file_of(self, item_id: str) -> Path | None:
        """The file a stored item is in (None: not stored)."""
        return self._queries.file_of(item_id)

    def append(self, items: list[MemoryItem]) -> None:
        """Add new items (written by the next `flush`, one durable append per file)."""
        self._writes.append(items)

    def replace(self, items: list[MemoryItem]) -> None:
        """Store changed versions of existing items (the next `flush` rewrites their files atomically)."""
        self._writes.replace(items)

    def relocate(self, item: MemoryItem) -> None:
        """Move an existing item to the file its (changed) layer belongs in (`ItemWrites.relocate`)."""
        self._writes.relocate(item)

    def remove(self, item_ids: list[str]) -> list[MemoryItem]:
        """Delete items from the store and every index (the next `flush` rewrites their files atomically)."""
        return self._writes.remove(item_ids)

    @property
    def dirty(self) -> bool:
        """Whether changes wait for `flush`."""
        return self._writes.dirty

    async def flush(self, durable: bool = True) -> None:
        """Write every pending change, shared by concurrent callers (`ItemWrites.flush`)."""
        await self._writes.flush(durable)

"""What the parts of `MemoryItemStore` share: how an item and its file become an index row (`ItemRows`),
and the state both the reconciler and the write path change (`StoreState`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import Any

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory import index_sql
from bot.memory.index_database import IndexDatabase
from bot.memory.item_caches import ItemCaches, is_core, is_pinned, is_shared
from bot.memory.item_facts import FactsRow
from bot.memory.item_storage import ItemIndex
from bot.storage.files import FileSignature
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths


def _epoch(moment: Any) -> float:
    return float(moment.timestamp())


class ItemRows:
    """Names of the item files in the index, and the rows and lines of items."""

    def __init__(self, paths: MemoryPaths, zone: tzinfo) -> None:
        self.paths = paths
        self.zone = zone
        self._context = {"zone": zone}
        self._items_dir = paths.items_dir
        self._path_cache: dict[str, Path] = {}
        self._names: dict[Path, str] = {}

    def name(self, path: Path) -> str:
        """The file's name in the index (relative to `memory/items/`)."""
        name = self._names.get(path)
        if name is None:
            name = self._names[path] = path.relative_to(self._items_dir).as_posix()
        return name

    def path_of(self, name: str) -> Path:
        path = self._path_cache.get(name)
        if path is None:
            path = self._path_cache[name] = self._items_dir / name
        return path

    def file_for(self, item: MemoryItem) -> Path:
        """The file a new item belongs in."""
        if item.layer is MemoryLayer.EPISODIC:
            return self.paths.episodic_file(item.created_at.astimezone(self.zone).date())
        if item.layer is MemoryLayer.SEMANTIC:
            return self.paths.semantic_file
        return self.paths.procedural_file

    def parse(self, line: bytes) -> MemoryItem:
        return MemoryItem.model_validate_json(line, context=self._context)

    @staticmethod
    def line_of(item: MemoryItem) -> bytes:
        # A lone surrogate (legal in JSON input, not in UTF-8) becomes a \uXXXX escape, as `append_lines` does.
        return dumps_line(item.to_json_dict()).encode("utf-8", "backslashreplace")

    def row(self, item: MemoryItem, name: str, pos: int, line: bytes) -> tuple[object, ...]:
        """The item's row in `items` (`index_sql.insert_items`)."""
        return (
            item.id,
            name,
            pos,
            item.layer.value,
            item.active,
            is_pinned(item),
            is_shared(item),
            is_core(item),
            # Day files are named YYYY-MM-DD.jsonl, the only item files whose names start with a digit.
            name.rsplit("/", 1)[-1][:1].isdigit(),
            item.fingerprint,
            item.key,
            _epoch(item.created_at),
            item.created_at.astimezone(self.zone).date().toordinal(),
            _epoch(item.updated_at),
            item.salience,
            item.confidence,
            item.speaker,
            line,
        )

    @staticmethod
    def facts(row: tuple[object, ...]) -> FactsRow:
        """The columns of a row (`row`) that the facts table keeps (`FactsTable`)."""
        return (row[0], row[3], row[4], row[12], row[16], row[13], row[14], row[15], row[8], row[1], row[2])

    @staticmethod
    def latest_date(row: tuple[object, ...]) -> float:
        """The later of a row's `createdAt` and `updatedAt`, in seconds since the epoch."""
        created, updated = row[11], row[13]
        assert isinstance(created, float) and isinstance(updated, float)
        return max(created, updated)

    @staticmethod
    def refs(items: Iterable[MemoryItem]) -> list[tuple[str, str]]:
        """(message id, item id) of each active item's references (`index_sql.insert_refs`)."""
        return [(reference, item.id) for item in items if item.active for reference in set(item.references)]


@dataclass
class StoreState:
    """The state the reconciler and the write path share: the database, what the files hold as far as the
    store knows, the changes waiting for `flush`, and the indexes to tell of every change."""

    db: IndexDatabase
    rows: ItemRows
    caches: ItemCaches
    indexes: list[ItemIndex] = field(default_factory=list)
    count: int = 0
    # The item files the database has rows or a record of.
    known_files: set[Path] = field(default_factory=set)
    # Per file as last read or written (also in the database; here so a refresh needs no query).
    signatures: dict[Path, FileSignature] = field(default_factory=dict)
    # Whether the subscribed indexes were given the items of the database (the first refresh does it).
    fed: bool = False
    pending_appends: dict[Path, list[str]] = field(default_factory=dict)
    pending_rewrites: set[Path] = field(default_factory=set)
    # The files a flush is writing now.
    writing: set[Path] = field(default_factory=set)
    # The files written since the last transaction, with their signatures (None: changed again meanwhile),
    # recorded in the database by the next transaction or at `close` rather than by a commit of their own
    # each turn; a crash before leaves them marked changed, so the next start re-reads them.
    written: dict[Path, FileSignature | None] = field(default_factory=dict)

    def pending(self, path: Path) -> bool:
        """Whether the file has changes not yet written (it is not re-read: the flush would overwrite them)."""
        return path in self.pending_rewrites or path in self.pending_appends or path in self.writing

    def transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        """`work` in one transaction, which also records the files written since the last one."""

        def recorded(connection: sqlite3.Connection) -> None:
            for path, signature in self.written.items():
                index_sql.record_file_written(connection, self.rows.name(path), signature)
            work(connection)

        with self.db.lock:  # a flush in another thread records its writes under it too
            self.db.transaction(recorded)
            self.written.clear()

    def write_refs(self, connection: sqlite3.Connection, items: Iterable[MemoryItem]) -> None:
        index_sql.insert_refs(connection, self.rows.refs(items))

    def mark_unwritten(self, connection: sqlite3.Connection, path: Path) -> None:
        """Mark `path` as changed in the database before the file is: a crash until `flush` has written it
        makes the next start re-read the file rather than trust rows that are ahead of it."""
        index_sql.mark_file_unwritten(connection, self.rows.name(path))
        self.known_files.add(path)

    def next_pos(self, connection: sqlite3.Connection, path: Path) -> int:
        """Take the next position in `path`, marking the file changed as `mark_unwritten` does."""
        pos = index_sql.take_next_pos(connection, self.rows.name(path))
        self.known_files.add(path)
        return pos

    def tell_added(self, items: list[MemoryItem]) -> None:
        for index in self.indexes:
            index.add_many(items)

    def tell_replaced(self, items: Iterable[MemoryItem]) -> None:
        for item in items:
            for index in self.indexes:
                index.remove(item.id)
                index.add(item)

    def tell_removed(self, item_ids: Iterable[str]) -> None:
        ids = list(item_ids)
        self.caches.forget(ids)
        if self.fed:
            for item_id in ids:
                for index in self.indexes:
                    index.remove(item_id)

"""`MemoryItemStore`: the JSONL files of `memory/items/` are the only store; this is their live view.

Each layer has its files (docs/memory.md): `episodic/YYYY-MM-DD.jsonl` (the day the item was made, in the
bot's time zone), `semantic.jsonl`, `procedural.jsonl`. The store re-reads a file whenever its size,
mtime or inode changed, so hand edits and deletions are picked up on the next use. Appends go through
`append_lines`; every other change rewrites the whole file with `write_atomic`. Indexes subscribe as
`ItemIndex` and are told of every item added or removed.

What was read is kept in an index database beside the files (`index/items.sqlite3`, SQLite from the
standard library), not in RAM: one row per item (its line, and the columns that lookups and retrieval
need), the lines kept without being items, and each file's signature. A restart re-reads only the
files whose signature changed; a missing, unreadable or foreign database is rebuilt from the files.
It is derived data and never ahead of the truth: a file with changes not yet written has no
signature in the database, so a crash before the write makes the next start re-read that file.
Items are parsed from their rows on demand (a small cache keeps the recently used ones). Retrieval
needs few of them parsed: it ranks candidates by `ItemFacts` (layer, day, speaker, salience ...) and
`neighbour_ids`, read from a covering index without the rows' lines, and the pack parses only what it reads.

Changes are made to the database first and written to the files by `flush`, which callers await
after releasing the scope's lock: concurrent turns then share one durable write (group commit)
instead of queueing for an fsync each. Reads and changes are serialised by `MemoryScope.lock`; the
database connection is also guarded by its own lock, since a flush reads it outside the scope's lock.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
import sqlite3
import stat
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME, INSERT_ITEM, IndexDatabase
from bot.memory.item_files import KeptLine, parse_item_file, read_raw
from bot.storage.durability import DeferredSync
from bot.storage.files import FileSignature, append_lines, file_signature, write_atomic
from bot.storage.folder_changes import FolderChanges
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths

log = logging.getLogger(__name__)

# Parsed items kept for reuse (about 3 KB each): the pinned, the core and what the last prompts' packs read
# (about 140 a prompt at 100,000 items: candidates are scored from their facts, not parsed).
ITEM_CACHE_SIZE = 512
# Rows parsed at a time when every item is streamed (start-up, `items()`): bounds the memory it takes.
STREAM_BATCH = 2000
# Items whose `ItemFacts` (and, apart, neighbour ids) are kept: a few prompts' candidates and their neighbours
# (about 1,000 a prompt at 100,000 items), cleared by any change.
FACTS_CACHE_SIZE = 8192
# Appends remembered for `appended_since` (a few minutes of a busy scope; past it, derived results start over).
APPEND_LOG_SIZE = 1024
# SQLite's limit on bound parameters is 32,766 (3.32+); a lookup by ids goes in chunks well below it.
IDS_PER_QUERY = 500
# SEMANTIC items this salient (names, constraints) are worth a prompt even without a word in common.
CORE_SALIENCE = 0.8


_LAYERS = {layer.value: layer for layer in MemoryLayer}


# The items just before and after an item in its day file (NULL for an item not in a day file).
_NEIGHBOUR_COLUMNS = (
    ", CASE WHEN i.day_file THEN (SELECT p.id FROM items p WHERE p.file = i.file AND p.pos < i.pos"
    " ORDER BY p.pos DESC LIMIT 1) END"
    ", CASE WHEN i.day_file THEN (SELECT n.id FROM items n WHERE n.file = i.file AND n.pos > i.pos"
    " ORDER BY n.pos LIMIT 1) END"
)


class ItemFacts(NamedTuple):
    """What retrieval ranks an item by, read from its columns in the index database without parsing its line."""

    id: str
    layer: MemoryLayer
    active: bool
    day: date  # the day it was made, in the bot's time zone
    speaker: str | None
    updated: float  # `updated_at`, in seconds since the epoch
    salience: float
    confidence: float


class ItemIndex(Protocol):
    """Something derived from the items (a search index) that follows every change."""

    def add(self, item: MemoryItem) -> None: ...

    def add_many(self, items: list[MemoryItem]) -> None: ...

    def remove(self, item_id: str) -> None: ...

    def clear(self) -> None: ...


def _in_chunks(ids: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """For each chunk of `IDS_PER_QUERY` of `ids`: the placeholders of its `IN (...)` and its ids, padded with
    the last to a power of two (at least 8). SQLite prepares a statement for each count of placeholders and
    keeps a hundred or so; a query with a count not prepared before is prepared again, which costs more
    than running it."""
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        size = 8
        while size < len(chunk):
            size *= 2
        yield ",".join("?" * size), [*chunk, *[chunk[-1]] * (size - len(chunk))]


def _is_pinned(item: MemoryItem) -> bool:
    return item.active and item.pinned


def _is_shared(item: MemoryItem) -> bool:
    return item.active and item.shared


def _is_core(item: MemoryItem) -> bool:
    return item.active and item.layer is MemoryLayer.SEMANTIC and item.salience >= CORE_SALIENCE


def _epoch(moment: Any) -> float:
    return float(moment.timestamp())


class MemoryItemStore:
    """Every item of one memory scope, kept in step with its files (rows in the index database)."""

    def __init__(
        self,
        paths: MemoryPaths,
        zone: tzinfo,
        deferred: DeferredSync | None = None,
        changes: FolderChanges | None = None,
    ) -> None:
        """`deferred`: where an append of new items leaves its fsync (their turn is in the archive, and a
        turn no item refers to is recorded again before a compaction); rewrites are always durable.
        `changes`: which item files changed since the last check (without it, each check `stat`s them all)."""
        self.paths = paths
        self._changes = changes
        # The item files on disk with their signatures, as of the last check.
        self._on_disk: dict[Path, FileSignature] | None = None
        # Files found changed but left unread (the bot's own changes to them were pending): looked at next time.
        self._unsettled: set[Path] = set()
        self._deferred = deferred
        self._zone = zone
        self._context = {"zone": zone}
        self._db = IndexDatabase(paths.index_dir / INDEX_FILE_NAME, zone)
        # Per file as last read or written (also in the database; here so a refresh needs no query).
        self._signatures: dict[Path, FileSignature] = {}
        self._skipped: dict[Path, int] = {}
        self._known_files: set[Path] = set()
        self._count = 0
        self._opened = False
        # Whether the subscribed indexes were given the items of the database (the first refresh does it).
        self._fed = False
        self._pending_appends: dict[Path, list[str]] = {}
        # The files written since the last transaction, with their signatures (None: changed again meanwhile),
        # recorded in the database by the next transaction or at `close` rather than by a commit of their own
        # each turn; a crash before leaves them marked changed (`_unwritten`), so the next start re-reads them.
        self._written: dict[Path, FileSignature | None] = {}
        self._pending_rewrites: set[Path] = set()
        self._flush_lock = asyncio.Lock()
        self._episodic_dir = paths.episodic_dir
        self._items_dir = paths.items_dir
        self._path_cache: dict[str, Path] = {}
        self._names: dict[Path, str] = {}
        self._cache: OrderedDict[str, MemoryItem] = OrderedDict()
        # Bumped by every change, so results derived from the items (the core ranking) can be cached.
        self._version = 0
        # The pinned and the core items, kept while `_chosen_version` stays: appends of other items leave it.
        self._chosen_version = 0
        self._core_cache: tuple[tuple[int, int], list[MemoryItem]] | None = None
        self._pinned_cache: tuple[int, list[MemoryItem]] | None = None
        self._shared_cache: tuple[int, list[MemoryItem]] | None = None
        # The ids added by the pure appends (new items, nothing else changed) since `_append_log_start`, with the
        # version each made: what a result derived at an older version may be brought up to date with.
        self._append_log: list[tuple[int, str]] = []
        self._append_log_start = 0
        # The `ItemFacts` and the neighbour ids read, valid while `_facts_version` is the store's `_version`:
        # an append keeps them in step (it drops only the entries it changes), any other change drops them all.
        # A message's lexical candidates are looked up while its vector is made, and its scoring then reads
        # only the others'; the next message reads only what the turn's own item changed.
        self._facts: dict[str, ItemFacts] = {}
        self._neighbour_ids: dict[str, list[str]] = {}
        # Each item's active EPISODIC neighbours' facts, as `episodic_neighbours` gave them (kept as the two above).
        self._episodic_neighbours: dict[str, list[ItemFacts]] = {}
        self._facts_version = -1
        self._writing: set[Path] = set()
        self._indexes: list[ItemIndex] = []
        # How many times a file was read and parsed (a restart with an up-to-date index reads none).
        self.files_read = 0

    @property
    def version(self) -> int:
        """Bumped by every change of the items."""
        return self._version

    def appended_since(self, version: int) -> list[str] | None:
        """The ids of the items added since `version` when nothing else changed meanwhile; None otherwise (a
        change, a re-read file, or a version too old to know)."""
        if version < self._append_log_start:
            return None
        log = self._append_log
        first = len(log)
        while first > 0 and log[first - 1][0] > version:
            first -= 1
        return [item_id for _, item_id in log[first:]]

    def _bump(self, appended: list[MemoryItem] | None = None) -> None:
        """A new version, after a change; `appended`: the change was only these new items."""
        self._version += 1
        if appended is None or any(_is_pinned(item) or _is_shared(item) or _is_core(item) for item in appended):
            self._chosen_version = self._version
        if appended is None or len(self._append_log) >= APPEND_LOG_SIZE:
            self._append_log.clear()
            self._append_log_start = self._version
        else:
            self._append_log += [(self._version, item.id) for item in appended]

    def subscribe(self, index: ItemIndex) -> None:
        """Keep `index` in step from now on (it is given every item already loaded)."""
        self._indexes.append(index)
        if self._fed:
            for batch in self._stream("WHERE active"):
                index.add_many(batch)

    def close(self) -> None:
        """Close the index database (the store reopens it when used again)."""
        if self._written and not self._db.broken:
            try:
                self._transaction(lambda _: None)  # records what was written since the last transaction
            except sqlite3.DatabaseError as error:  # the files are re-read at the next start
                log.warning("[Memory] Could not record the item files written in %s: %s", self._db.path, error)
        self._db.close()

    # -- the database ------------------------------------------------------------------------------

    def _execute(self, sql: str, parameters: Sequence[object] = ()) -> sqlite3.Cursor:
        with self._db.lock:
            try:
                return self._db.connection.execute(sql, parameters)
            except sqlite3.DatabaseError:
                self._db.broken = True
                raise

    def _rows(self, sql: str, parameters: Sequence[object] = ()) -> list[Any]:
        with self._db.lock:
            try:
                return self._db.connection.execute(sql, parameters).fetchall()
            except sqlite3.DatabaseError:
                self._db.broken = True
                raise

    def _transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        with self._db.lock:
            connection = self._db.connection
            try:
                connection.execute("BEGIN")
                try:
                    self._record_written(connection)
                    work(connection)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
                self._written.clear()
            except sqlite3.DatabaseError:
                self._db.broken = True
                raise

    def _name(self, path: Path) -> str:
        name = self._names.get(path)
        if name is None:
            name = self._names[path] = path.relative_to(self._items_dir).as_posix()
        return name

    def _path_of(self, name: str) -> Path:
        path = self._path_cache.get(name)
        if path is None:
            path = self._path_cache[name] = self._items_dir / name
        return path

    def _parse(self, line: bytes) -> MemoryItem:
        return MemoryItem.model_validate_json(line, context=self._context)

    def _row(self, item: MemoryItem, name: str, pos: int, line: bytes) -> tuple[object, ...]:
        return (
            item.id,
            name,
            pos,
            item.layer.value,
            item.active,
            _is_pinned(item),
            _is_shared(item),
            _is_core(item),
            # Day files are named YYYY-MM-DD.jsonl, the only item files whose names start with a digit.
            name.rsplit("/", 1)[-1][:1].isdigit(),
            item.fingerprint,
            item.key,
            _epoch(item.created_at),
            item.created_at.astimezone(self._zone).date().toordinal(),
            _epoch(item.updated_at),
            item.salience,
            item.confidence,
            item.speaker,
            line,
        )

    @staticmethod
    def _line_of(item: MemoryItem) -> bytes:
        # A lone surrogate (legal in JSON input, not in UTF-8) becomes a \uXXXX escape, as `append_lines` does.
        return dumps_line(item.to_json_dict()).encode("utf-8", "backslashreplace")

    def _write_refs(self, connection: sqlite3.Connection, items: Iterable[MemoryItem]) -> None:
        rows = [(reference, item.id) for item in items if item.active for reference in set(item.references)]
        connection.executemany("INSERT OR IGNORE INTO refs (ref, id) VALUES (?, ?)", rows)

    @staticmethod
    def _forget_refs(connection: sqlite3.Connection, item_ids: Sequence[str]) -> None:
        connection.executemany("DELETE FROM refs WHERE id = ?", [(item_id,) for item_id in item_ids])

    def _stream(self, where: str, parameters: Sequence[object] = ()) -> Iterator[list[MemoryItem]]:
        """Items of the rows matching `where`, parsed a batch at a time (in row order, changes tolerated)."""
        last = 0
        while True:
            rows = self._rows(
                f"SELECT rowid, line FROM items {where} {'AND' if where else 'WHERE'} rowid > ? "
                f"ORDER BY rowid LIMIT {STREAM_BATCH}",
                (*parameters, last),
            )
            if not rows:
                return
            last = rows[-1][0]
            yield [self._parse(line) for _, line in rows]

    # -- reading -----------------------------------------------------------------------------------

    def refresh_sync(self) -> bool:
        """Re-read every file that changed on disk since last seen; True when anything changed."""
        if self._db.broken:
            log.warning("[Memory] Index %s failed; rebuilding it from the item files", self._db.path)
            self._rebuild()
        try:
            return self._refresh()
        except sqlite3.DatabaseError as error:
            log.warning("[Memory] Index %s failed (%s); rebuilding it from the item files", self._db.path, error)
            self._rebuild()
            return self._refresh()

    def _rebuild(self) -> None:
        self._db.reset()
        self._forget_loaded()

    def _forget_loaded(self) -> None:
        """Start over as if nothing had been read (the database is empty again)."""
        self._on_disk = None
        self._opened = self._fed = False
        self._signatures.clear()
        self._written.clear()
        self._skipped.clear()
        self._known_files.clear()
        self._cache.clear()
        self._count = 0
        self._bump()
        for index in self._indexes:
            index.clear()

    def _open(self) -> None:
        """Read what the database knows of the files: their signatures (None: re-read it)."""
        self._db.take_made_afresh()
        for name, mtime, size, inode, skipped in self._rows("SELECT name, mtime_ns, size, inode, skipped FROM files"):
            path = self._path_of(name)
            self._known_files.add(path)
            self._skipped[path] = skipped
            if mtime is not None:
                self._signatures[path] = (mtime, size, inode)
        self._count = self._rows("SELECT count(*) FROM items")[0][0]
        self._opened = True

    def _refresh(self) -> bool:
        try:
            return self._refresh_files()
        except BaseException:
            self._on_disk = None  # the events this check took are gone: the next one checks every file
            raise

    def _refresh_files(self) -> bool:
        present, suspects = self._files_on_disk()
        if self._opened and self._db.take_made_afresh():
            # Closed, then reopened on a database made afresh (it was lost or unreadable meanwhile): the
            # rows read before are gone, so every file is read again.
            log.warning("[Memory] Index %s was lost while closed; reading the item files again", self._db.path)
            self._forget_loaded()
            suspects = None
        if not self._opened:
            if not present and not self._db.path.exists():
                return False  # no items yet: no database either (a stranger's message must leave no file)
            self._open()
            suspects = None
        # The files that may differ from what was read: those the folders' events name, and those left
        # unread last time (changes of the bot's own were pending on them); every file when not known.
        # A year of day files is not walked twice a message.
        if suspects is not None:
            suspects |= self._unsettled
        self._unsettled = set()
        changed = False
        for path in list(self._known_files if suspects is None else suspects & self._known_files):
            if path not in present:
                if self._pending(path):
                    self._unsettled.add(path)
                else:
                    self._drop_file(path)
                    changed = True
        checked = present if suspects is None else {path: present[path] for path in suspects if path in present}
        stale = [path for path, signature in checked.items() if self._signatures.get(path) != signature]
        if stale:
            # Loading makes many objects and no reference cycles: pausing the cyclic garbage collector
            # meanwhile saves it from re-scanning the growing heap (a quarter of a large start-up).
            collecting = gc.isenabled()
            gc.disable()
            try:
                # Loaded in name order, so the later file wins for an id found twice (see `relocate`).
                for path in sorted(stale, key=str):
                    if self._pending(path):
                        self._unsettled.add(path)
                    else:
                        self._load_file(path, present[path])
                        changed = True
            finally:
                if collecting:
                    gc.enable()
        if not self._fed:
            self._fed = True
            if self._indexes:
                for batch in self._stream("WHERE active"):
                    for index in self._indexes:
                        index.add_many(batch)
        return changed

    def _files_on_disk(self) -> tuple[dict[Path, FileSignature], set[Path] | None]:
        """Every items file with its signature, and those that may have changed since the last check: the
        ones the folders' events name, checked again (see `FolderChanges`); or, when that is not known,
        every file (None), after one directory scan and one `stat` per file."""
        if self._changes is not None:
            # Both asked every time: each answer takes its folder's events.
            in_episodic, in_items = self._changes.changed(self._episodic_dir, self._items_dir)
            known = self._on_disk
            if known is not None and in_episodic is not None and in_items is not None:
                if self._episodic_dir not in in_items:  # the folder itself made, moved or deleted: scan it
                    suspects: set[Path] = set()
                    for path in in_episodic:
                        suspect = self._path_of("episodic/" + path.name)
                        self._recheck(known, suspect, path.name.endswith(".jsonl"))
                        suspects.add(suspect)
                    for path in in_items:
                        self._recheck(known, path, path in (self.paths.semantic_file, self.paths.procedural_file))
                        suspects.add(path)
                    return known, suspects
        self._on_disk = self._scan_files()
        return self._on_disk, None

    @staticmethod
    def _recheck(known: dict[Path, FileSignature], path: Path, is_item_file: bool) -> None:
        try:
            status = os.stat(path) if is_item_file else None
        except (FileNotFoundError, NotADirectoryError):
            status = None
        if status is not None and stat.S_ISREG(status.st_mode):
            known[path] = (status.st_mtime_ns, status.st_size, status.st_ino)
        else:
            known.pop(path, None)

    def _scan_files(self) -> dict[Path, FileSignature]:
        found: dict[Path, FileSignature] = {}
        try:
            with os.scandir(self._episodic_dir) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl") and entry.is_file():
                        status = entry.stat()
                        found[self._path_of("episodic/" + entry.name)] = (
                            status.st_mtime_ns,
                            status.st_size,
                            status.st_ino,
                        )
        except FileNotFoundError:
            pass
        for path in (self.paths.semantic_file, self.paths.procedural_file):
            signature = file_signature(path)
            if signature is not None:
                found[path] = signature
        return found

    def _pending(self, path: Path) -> bool:
        # A file with unwritten changes is not re-read: the flush about to happen would overwrite them.
        return path in self._pending_rewrites or path in self._pending_appends or path in self._writing

    def _tell_removed(self, item_ids: Iterable[str]) -> None:
        if self._fed:
            for item_id in item_ids:
                self._cache.pop(item_id, None)
                for index in self._indexes:
                    index.remove(item_id)
        else:
            for item_id in item_ids:
                self._cache.pop(item_id, None)

    def _load_file(self, path: Path, signature: FileSignature) -> None:
        name = self._name(path)
        parsed = parse_item_file(read_raw(path), path, self._zone)
        self.files_read += 1
        loaded: dict[str, tuple[MemoryItem, bytes, int]] = {}
        kept: list[tuple[str, int, bytes]] = []
        lines = iter(parsed.lines)
        items = iter(parsed.items)
        for pos, entry in enumerate(parsed.layout):
            if isinstance(entry, KeptLine):
                # A kept line goes back byte for byte (undecodable bytes were read as surrogate escapes).
                kept.append((name, pos, entry.text.encode("utf-8", "surrogateescape")))
                continue
            item, line = next(items), next(lines).encode("utf-8", "surrogateescape")
            first = loaded.get(item.id)
            # An id twice in one file: the later line wins, at the place of the first.
            loaded[item.id] = (item, line, pos if first is None else first[2])
        ids = list(loaded)
        before = [row[0] for row in self._rows("SELECT id FROM items WHERE file = ?", (name,))]
        # An id also found in another file: this one wins (see `relocate`).
        elsewhere: list[str] = []
        for marks, padded in _in_chunks(ids):
            rows = self._rows(f"SELECT id FROM items WHERE file != ? AND id IN ({marks})", (name, *padded))
            elsewhere += [row[0] for row in rows]

        def write(connection: sqlite3.Connection) -> None:
            connection.execute("DELETE FROM items WHERE file = ?", (name,))
            connection.execute("DELETE FROM kept WHERE file = ?", (name,))
            self._forget_refs(connection, [*before, *elsewhere])
            connection.executemany(
                INSERT_ITEM, [self._row(item, name, pos, line) for item, line, pos in loaded.values()]
            )
            connection.executemany("INSERT INTO kept (file, pos, line) VALUES (?, ?, ?)", kept)
            self._write_refs(connection, (item for item, _, _ in loaded.values()))
            connection.execute(
                "INSERT OR REPLACE INTO files (name, mtime_ns, size, inode, skipped, unterminated, next_pos)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, *signature, parsed.skipped, parsed.unterminated, len(parsed.layout)),
            )

        self._transaction(write)
        self._count += len(loaded) - len(before) - len(elsewhere)
        self._tell_removed([*before, *elsewhere])
        if self._fed:
            batch = [item for item, _, _ in loaded.values()]
            for index in self._indexes:
                index.add_many(batch)
        self._known_files.add(path)
        self._skipped[path] = parsed.skipped
        self._signatures[path] = signature
        self._bump()

    def _drop_file(self, path: Path) -> None:
        name = self._name(path)
        ids = [row[0] for row in self._rows("SELECT id FROM items WHERE file = ?", (name,))]

        def write(connection: sqlite3.Connection) -> None:
            connection.execute("DELETE FROM items WHERE file = ?", (name,))
            connection.execute("DELETE FROM kept WHERE file = ?", (name,))
            connection.execute("DELETE FROM files WHERE name = ?", (name,))
            self._forget_refs(connection, ids)

        self._transaction(write)
        self._count -= len(ids)
        self._tell_removed(ids)
        self._known_files.discard(path)
        self._signatures.pop(path, None)
        self._skipped.pop(path, None)
        self._bump()

    def _items_from(self, rows: Iterable[tuple[str, bytes]]) -> list[MemoryItem]:
        found = []
        for item_id, line in rows:
            item = self._cache.get(item_id)
            if item is None:
                item = self._remember(self._parse(line))
            found.append(item)
        return found

    def _remember(self, item: MemoryItem) -> MemoryItem:
        self._cache[item.id] = item
        if len(self._cache) > ITEM_CACHE_SIZE:
            self._cache.popitem(last=False)
        return item

    def get(self, item_id: str) -> MemoryItem | None:
        item = self._cache.get(item_id)
        if item is not None:
            return item
        rows = self._rows("SELECT line FROM items WHERE id = ?", (item_id,))
        return self._remember(self._parse(rows[0][0])) if rows else None

    def get_many(self, item_ids: Iterable[str]) -> dict[str, MemoryItem]:
        """The stored items of `item_ids` in that order (those not stored are left out), in a few queries."""
        wanted = list(dict.fromkeys(item_ids))
        # Taken from the cache first: parsing the others adds them to it, which may push these out.
        found = {item_id: item for item_id in wanted if (item := self._cache.get(item_id)) is not None}
        missing = [item_id for item_id in wanted if item_id not in found]
        for marks, padded in _in_chunks(missing):
            rows = self._rows(f"SELECT id, line FROM items WHERE id IN ({marks})", padded)
            found.update((item.id, item) for item in self._items_from(rows))
        return {item_id: found[item_id] for item_id in wanted if item_id in found}

    def items(self) -> Iterable[MemoryItem]:
        """Every item, active or not (read from the database a batch at a time)."""
        for batch in self._stream(""):
            yield from batch

    def recently_updated(self, limit: int) -> list[MemoryItem]:
        """The `limit` active items changed last, newest first."""
        rows = self._rows("SELECT id, line FROM items WHERE active ORDER BY updated DESC, id LIMIT ?", (limit,))
        return self._items_from(rows)

    def newest_in_layer(self, layer: MemoryLayer, limit: int) -> list[MemoryItem]:
        """The `limit` active items of one layer changed last, newest first."""
        # The ids are sorted alone, then only those lines are read: rows sorted with their lines are slow.
        rows = self._rows(
            "SELECT id FROM items WHERE active AND layer = ? ORDER BY updated DESC, id LIMIT ?", (layer.value, limit)
        )
        return list(self.get_many(item_id for (item_id,) in rows).values())

    def superseded(self) -> list[MemoryItem]:
        """Every item a newer version replaced (kept for history)."""
        return [item for batch in self._stream("WHERE NOT active") for item in batch]

    def count_by_layer(self) -> dict[MemoryLayer, int]:
        counts = dict.fromkeys(MemoryLayer, 0)
        for layer, count in self._rows("SELECT layer, count(*) FROM items WHERE active GROUP BY layer"):
            counts[MemoryLayer(layer)] = count
        return counts

    def find_by_fingerprint(self, fingerprint: str, layer: MemoryLayer | None = None) -> MemoryItem | None:
        """The active item with this fingerprint (in `layer`, when given)."""
        # Two statements rather than `layer LIKE ?` with "%" for any: a bound LIKE pattern makes SQLite
        # prepare the statement again at every run (four times the lookup's cost).
        if layer is None:
            rows = self._rows(
                "SELECT id, line FROM items WHERE fingerprint = ? AND active ORDER BY id LIMIT 1", (fingerprint,)
            )
        else:
            rows = self._rows(
                "SELECT id, line FROM items WHERE fingerprint = ? AND active AND layer = ? ORDER BY id LIMIT 1",
                (fingerprint, layer.value),
            )
        return self._items_from(rows)[0] if rows else None

    def referring_to(self, references: Iterable[str]) -> list[MemoryItem]:
        """The active items that refer to any of `references` (message ids)."""
        return list(self.get_many(self.ids_referring_to(references)).values())

    def ids_referring_to(self, references: Iterable[str]) -> list[str]:
        """The ids of the active items that refer to any of `references` (without parsing them)."""
        wanted = list(dict.fromkeys(references))
        ids: list[str] = []
        for marks, padded in _in_chunks(wanted):
            rows = self._rows(f"SELECT DISTINCT id FROM refs WHERE ref IN ({marks})", padded)
            ids += [row[0] for row in rows]
        return ids

    def referring_among(self, item_ids: Collection[str], references: AbstractSet[str]) -> set[str]:
        """Those of `item_ids` that refer to any of `references` (message ids), read through whichever of
        the two is shorter: a long live conversation has many more ids than a message has candidates."""
        if len(references) <= len(item_ids):
            return set(self.ids_referring_to(references)) & set(item_ids)
        wanted = list(item_ids)
        found: set[str] = set()
        for marks, padded in _in_chunks(wanted):
            rows = self._rows(f"SELECT id, ref FROM refs WHERE id IN ({marks})", padded)
            found.update(item_id for item_id, ref in rows if ref in references)
        return found

    def superseded_by(self, newer: MemoryItem) -> list[MemoryItem]:
        """The items `newer` superseded (they shared its slot)."""
        if not newer.key:
            return []
        rows = self._rows("SELECT id, line FROM items WHERE slot = ? AND NOT active", (newer.key,))
        return [item for item in self._items_from(rows) if item.superseded_by == newer.id]

    def is_referenced(self, reference: str) -> bool:
        """Whether an active item refers to `reference` (a message id)."""
        return bool(self._rows("SELECT 1 FROM refs WHERE ref = ? LIMIT 1", (reference,)))

    def core(self, limit: int) -> list[MemoryItem]:
        """The `limit` most salient (then newest) active SEMANTIC items of salience at least `CORE_SALIENCE`."""
        cached = self._core_cache
        if cached is not None and cached[0] == (self._chosen_version, limit):
            return cached[1]
        rows = self._rows(
            "SELECT id, line FROM items WHERE active AND core ORDER BY salience DESC, updated DESC LIMIT ?", (limit,)
        )
        ranked = self._items_from(rows)
        self._core_cache = ((self._chosen_version, limit), ranked)
        return ranked

    def speakers_among(self, names: Iterable[str]) -> set[str]:
        """Those of `names` that speak in some active item (see `MemoryItem.speaker`)."""
        return {
            name for name in names if self._rows("SELECT 1 FROM items WHERE active AND speaker = ? LIMIT 1", (name,))
        }

    def pinned(self) -> list[MemoryItem]:
        cached = self._pinned_cache
        if cached is not None and cached[0] == self._chosen_version:
            return cached[1]
        found = self._items_from(self._rows("SELECT id, line FROM items WHERE active AND pinned ORDER BY id"))
        self._pinned_cache = (self._chosen_version, found)
        return found

    def shared(self) -> list[MemoryItem]:
        """The active items the owner shared with every chat (`/memory share ID`), oldest first."""
        cached = self._shared_cache
        if cached is not None and cached[0] == self._chosen_version:
            return cached[1]
        found = self._items_from(self._rows("SELECT id, line FROM items WHERE active AND shared ORDER BY id"))
        found.sort(key=lambda item: item.created_at)
        self._shared_cache = (self._chosen_version, found)
        return found

    def find_by_key(self, key: str, layer: MemoryLayer) -> list[MemoryItem]:
        """The active items filling the slot `key` in `layer`."""
        rows = self._rows("SELECT id, line FROM items WHERE slot = ? AND active AND layer = ?", (key, layer.value))
        return self._items_from(rows)

    def __len__(self) -> int:
        return self._count

    def in_layer(self, layer: MemoryLayer) -> list[MemoryItem]:
        """Active items of one layer (EPISODIC means every day file: prefer `recent_episodic`)."""
        return [item for batch in self._stream("WHERE active AND layer = ?", (layer.value,)) for item in batch]

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
        first_file = self._name(self.paths.episodic_file(since.astimezone(self._zone).date()))
        while len(found) < limit:
            rows = self._rows(
                "SELECT id FROM items WHERE layer = 'EPISODIC' AND active = 1 AND day_file = 1 AND file >= ?"
                " AND created >= ? ORDER BY file DESC, created DESC LIMIT ? OFFSET ?",
                (first_file, _epoch(since), batch, offset),
            )
            found += [item_id for (item_id,) in rows if not skip(item_id)][: limit - len(found)]
            if len(rows) < batch:
                break
            offset += batch
            batch *= 4
        return list(self.get_many(found).values())

    def _fresh_caches(self) -> None:
        """Drop the facts and neighbour ids read before the last change; past their size, the older half
        (dicts keep insertion order: what the message being scored read last stays)."""
        if self._facts_version != self._version:
            self._facts.clear()
            self._neighbour_ids.clear()
            self._episodic_neighbours.clear()
            self._facts_version = self._version
        for cache in (self._facts, self._neighbour_ids, self._episodic_neighbours):
            if len(cache) > FACTS_CACHE_SIZE:
                for item_id in list(itertools.islice(cache, len(cache) // 2)):
                    del cache[item_id]

    def facts_of(self, item_ids: Iterable[str], with_neighbours: bool = False) -> dict[str, ItemFacts]:
        """The `ItemFacts` of the stored items of `item_ids`, in that order, read in one query per `IDS_PER_QUERY`
        ids not read since the last change (no line is parsed); `with_neighbours` reads their `neighbour_ids`
        in the same queries."""
        wanted = list(dict.fromkeys(item_ids))
        self._fresh_caches()
        known, around = self._facts, self._neighbour_ids
        missing = [item_id for item_id in wanted if item_id not in known or (with_neighbours and item_id not in around)]
        neighbours = _NEIGHBOUR_COLUMNS if with_neighbours else ""
        for marks, padded in _in_chunks(missing):
            # The covering index `items_facts` holds every column asked for: no row (with its line) is read.
            rows = self._rows(
                f"SELECT i.id, i.layer, i.active, i.day, i.speaker, i.updated, i.salience, i.confidence{neighbours}"
                f" FROM items i INDEXED BY items_facts WHERE i.id IN ({marks})",
                padded,
            )
            for row in rows:
                item_id, layer, active, day, speaker, updated, salience, confidence = row[:8]
                known[item_id] = ItemFacts(
                    item_id, _LAYERS[layer], bool(active), date.fromordinal(day), speaker, updated, salience, confidence
                )
                if with_neighbours:
                    around[item_id] = [other for other in row[8:] if other is not None]
        return {item_id: facts for item_id in wanted if (facts := known.get(item_id)) is not None}

    def neighbour_ids(self, item_ids: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the items just before and after each of `item_ids` in its day file (in that order; none
        for an item not in a day file or not stored), read with their facts when not read since the last change."""
        ids = list(item_ids)
        self._fresh_caches()
        self.facts_of([item_id for item_id in ids if item_id not in self._neighbour_ids], with_neighbours=True)
        return {item_id: self._neighbour_ids.get(item_id, []) for item_id in ids}

    def episodic_neighbours(self, item_ids: Iterable[str]) -> dict[str, list[ItemFacts]]:
        """The facts of the active EPISODIC items just before and after each of `item_ids` in its day file (in
        that order), kept from message to message as `neighbour_ids` is."""
        ids = list(item_ids)
        self._fresh_caches()
        kept = self._episodic_neighbours
        missing = [item_id for item_id in ids if item_id not in kept]
        if missing:
            around = self.neighbour_ids(missing)
            found = self.facts_of(other for others in around.values() for other in others)
            for item_id, others in around.items():
                kept[item_id] = [
                    facts
                    for other in others
                    if (facts := found.get(other)) is not None and facts.active and facts.layer is MemoryLayer.EPISODIC
                ]
        return {item_id: kept[item_id] for item_id in ids}

    # -- writing -----------------------------------------------------------------------------------

    def file_for(self, item: MemoryItem) -> Path:
        """The file a new item belongs in."""
        if item.layer is MemoryLayer.EPISODIC:
            return self.paths.episodic_file(item.created_at.astimezone(self._zone).date())
        if item.layer is MemoryLayer.SEMANTIC:
            return self.paths.semantic_file
        return self.paths.procedural_file

    def _unwritten(self, connection: sqlite3.Connection, path: Path) -> None:
        """Mark `path` as changed in the database before the file is: a crash until `flush` has written it
        makes the next start re-read the file rather than trust rows that are ahead of it."""
        connection.execute(
            "INSERT INTO files (name) VALUES (?) ON CONFLICT (name) DO UPDATE SET mtime_ns = NULL",
            (self._name(path),),
        )
        self._known_files.add(path)

    def _next_pos(self, connection: sqlite3.Connection, path: Path) -> int:
        """Take the next position in `path`, marking the file changed as `_unwritten` does (one statement)."""
        pos: int = connection.execute(
            "INSERT INTO files (name, next_pos) VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET mtime_ns = NULL, next_pos = next_pos + 1 RETURNING next_pos - 1",
            (self._name(path),),
        ).fetchone()[0]
        self._known_files.add(path)
        return pos

    def _changed(self, items: list[MemoryItem], appended: bool = False) -> None:
        self._bump(appended=items if appended else None)
        for item in items:
            self._cache.pop(item.id, None)
            self._remember(item)

    def append(self, items: list[MemoryItem]) -> None:
        """Add new items (written by the next `flush`, one durable append per file)."""
        placed: list[tuple[MemoryItem, Path]] = []
        # The items whose facts or neighbours the appends change: each new one, and the one before it in its
        # file (its next neighbour is now the new one). None: an id stored before, so anything may have moved.
        touched: list[str] | None = []

        def write(connection: sqlite3.Connection) -> None:
            nonlocal touched
            for item in items:
                path = self.file_for(item)
                replaced = connection.execute("SELECT 1 FROM items WHERE id = ?", (item.id,)).fetchone()
                if replaced is not None:
                    self._forget_refs(connection, [item.id])
                    touched = None
                else:
                    self._count += 1
                name = self._name(path)
                pos = self._next_pos(connection, path)
                connection.execute(INSERT_ITEM, self._row(item, name, pos, self._line_of(item)))
                self._write_refs(connection, [item])
                placed.append((item, path))
                if touched is not None:
                    before = connection.execute(
                        "SELECT id FROM items WHERE file = ? AND pos < ? ORDER BY pos DESC LIMIT 1", (name, pos)
                    ).fetchone()
                    touched += [item.id] if before is None else [item.id, before[0]]

        self._transaction(write)
        for item, path in placed:
            self._pending_appends.setdefault(path, []).append(item.id)
            for index in self._indexes:
                index.add(item)
        facts_in_step = self._facts_version == self._version
        self._changed(items, appended=touched is not None)
        if facts_in_step and touched is not None:
            # A turn appends an item or two: the facts read for the last message stay, but for the touched.
            for item_id in touched:
                self._facts.pop(item_id, None)
                self._neighbour_ids.pop(item_id, None)
                self._episodic_neighbours.pop(item_id, None)
            self._facts_version = self._version

    def replace(self, items: list[MemoryItem]) -> None:
        """Store changed versions of existing items (the next `flush` rewrites their files atomically)."""
        paths: list[Path] = []

        def write(connection: sqlite3.Connection) -> None:
            for item in items:
                row = connection.execute("SELECT file, pos FROM items WHERE id = ?", (item.id,)).fetchone()
                if row is None:
                    raise KeyError(item.id)
                path = self._path_of(row[0])
                self._unwritten(connection, path)
                connection.execute(INSERT_ITEM, self._row(item, row[0], row[1], self._line_of(item)))
                self._forget_refs(connection, [item.id])
                self._write_refs(connection, [item])
                paths.append(path)

        self._transaction(write)
        for item in items:
            for index in self._indexes:
                index.remove(item.id)
                index.add(item)
        self._pending_rewrites.update(paths)
        self._changed(items)

    def relocate(self, item: MemoryItem) -> None:
        """Move an existing item to the file its (changed) layer belongs in.

        `flush` appends to the new file before rewriting the old one, so a crash in between leaves
        the item twice with one id (the later file wins on load), never lost.
        """
        new_path = self.file_for(item)
        old: list[Path] = []

        def write(connection: sqlite3.Connection) -> None:
            row = connection.execute("SELECT file FROM items WHERE id = ?", (item.id,)).fetchone()
            if row is None:
                raise KeyError(item.id)
            old_path = self._path_of(row[0])
            self._unwritten(connection, old_path)
            pos = self._next_pos(connection, new_path)
            connection.execute(INSERT_ITEM, self._row(item, self._name(new_path), pos, self._line_of(item)))
            self._forget_refs(connection, [item.id])
            self._write_refs(connection, [item])
            old.append(old_path)

        self._transaction(write)
        for index in self._indexes:
            index.remove(item.id)
            index.add(item)
        self._pending_appends.setdefault(new_path, []).append(item.id)
        self._pending_rewrites.add(old[0])
        self._changed([item])

    def remove(self, item_ids: list[str]) -> list[MemoryItem]:
        """Delete items from the store and every index (the next `flush` rewrites their files atomically)."""
        found = self.get_many(item_ids)
        removed = [found[item_id] for item_id in dict.fromkeys(item_ids) if item_id in found]
        paths: list[Path] = []

        def write(connection: sqlite3.Connection) -> None:
            for item in removed:
                row = connection.execute("DELETE FROM items WHERE id = ? RETURNING file", (item.id,)).fetchone()
                if row is not None:
                    path = self._path_of(row[0])
                    self._unwritten(connection, path)
                    paths.append(path)
            self._forget_refs(connection, [item.id for item in removed])

        self._transaction(write)
        self._count -= len(paths)
        self._bump()
        self._tell_removed([item.id for item in removed])
        self._pending_rewrites.update(paths)
        return removed

    @property
    def dirty(self) -> bool:
        return bool(self._pending_appends or self._pending_rewrites)

    async def flush(self, durable: bool = True) -> None:
        """Write every pending change: appends first, then whole-file rewrites.

        Concurrent callers share the work (group commit): whoever flushes writes everything pending
        at that moment, and a caller whose changes were taken by a flush in progress returns when
        that flush is done. Each file's content is taken when the flush starts, so it is consistent.
        `durable=False` (a turn's own record, which the archive holds) leaves the fsync of appends to
        the `DeferredSync` given at construction, unless rewrites follow them: an item moved between
        files is on disk in its new file before its old file is rewritten without it.
        """
        async with self._flush_lock:
            appends, rewrites = self._pending_appends, self._pending_rewrites
            self._pending_appends, self._pending_rewrites = {}, set()
            try:
                # An append would cut off a hand-written last line that lacks its newline; a rewrite keeps it.
                rewrites |= {path for path in appends if self._unterminated(path)}
                append_jobs = [
                    (path, self._lines_of(path, ids)) for path, ids in appends.items() if path not in rewrites
                ]
                rewrite_jobs = [(path, self._file_bytes(path)) for path in rewrites]
            except BaseException:
                self._keep_pending(appends, rewrites)
                raise
            self._writing = set(appends) | rewrites
            deferred = None if durable or rewrite_jobs else self._deferred
            try:
                for path, lines in append_jobs:
                    await append_lines(path, lines, deferred)
                    self._after_write(path)
                for path, data in rewrite_jobs:
                    await write_atomic(path, data)
                    self._after_write(path)
            except BaseException:
                # Not written: keep it pending so the next flush tries again.
                self._keep_pending(appends, rewrites)
                raise
            finally:
                self._writing = set()
            if durable and self._deferred is not None:
                # What this caller changed may have gone out with a flush that left its fsync for later.
                await self._deferred.sync()

    def _keep_pending(self, appends: dict[Path, list[str]], rewrites: set[Path]) -> None:
        for path, ids in appends.items():
            self._pending_appends.setdefault(path, [])[:0] = ids
        self._pending_rewrites |= rewrites

    def _unterminated(self, path: Path) -> bool:
        if path in self._written:
            return False  # the bot wrote it last, ending every line
        rows = self._rows("SELECT unterminated FROM files WHERE name = ?", (self._name(path),))
        return bool(rows and rows[0][0])

    def _lines_of(self, path: Path, item_ids: list[str]) -> list[str]:
        """The lines to append to `path`: the items of `item_ids` still stored there, in that order."""
        name = self._name(path)
        lines: dict[str, str] = {}
        for marks, padded in _in_chunks(item_ids):
            rows = self._rows(f"SELECT id, line FROM items WHERE file = ? AND id IN ({marks})", (name, *padded))
            lines.update((item_id, line.decode("utf-8", "surrogateescape")) for item_id, line in rows)
        return [lines[item_id] for item_id in dict.fromkeys(item_ids) if item_id in lines]

    def _file_bytes(self, path: Path) -> bytes:
        """The file's new text: its items and kept lines in their places (items added since at the end)."""
        name = self._name(path)
        rows = self._rows(
            "SELECT pos, line FROM items WHERE file = ? UNION ALL SELECT pos, line FROM kept WHERE file = ? ORDER BY 1",
            (name, name),
        )
        return b"".join(line + b"\n" for _, line in rows)

    @property
    def skipped_lines(self) -> int:
        """Lines of the item files that are not valid items (kept in their files, left out of memory)."""
        return sum(self._skipped.values())

    def _after_write(self, path: Path) -> None:
        signature = file_signature(path)
        if signature is None:
            return
        # The bot ends every line it writes; a file changed again since this flush began stays unwritten.
        changing = path in self._pending_appends or path in self._pending_rewrites
        with self._db.lock:
            self._written[path] = None if changing else signature
        self._signatures[path] = signature

    def _record_written(self, connection: sqlite3.Connection) -> None:
        """Record the files written since the last transaction (in the one beginning): no commit of their own."""
        for path, signature in self._written.items():
            if signature is None:
                connection.execute("UPDATE files SET unterminated = 0 WHERE name = ?", (self._name(path),))
            else:
                connection.execute(
                    "UPDATE files SET mtime_ns = ?, size = ?, inode = ?, unterminated = 0 WHERE name = ?",
                    (*signature, self._name(path)),
                )

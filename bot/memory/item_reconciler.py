"""`ItemReconciler`: keeps the index database in step with the JSONL item files, which stay the truth.

A file is re-read whenever its size, mtime or inode changed, so hand edits and deletions are picked up
on the next use; a line that is not a valid item is skipped (logged by the parser, counted in
`skipped_lines`) and kept in its file, byte for byte, at its place. A restart re-reads only the files
whose signature changed; a missing, unreadable or foreign database is rebuilt from the files. A file
with changes of the bot's own not yet written is left unread until they are (the flush about to
happen would overwrite what was read).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from bot.domain.memory import MemoryItem
from bot.memory import index_sql
from bot.memory.item_files import KeptLine, parse_item_file, read_raw
from bot.memory.item_queries import ItemQueries
from bot.memory.item_state import ItemRows, StoreState
from bot.memory.item_storage import ItemIndex
from bot.storage.files import FileSignature, file_signature
from bot.storage.folder_changes import FolderChanges

log = logging.getLogger(__name__)

# A date past now by more than this is a slip of a hand edit (a year typed wrong), not a clock or zone difference.
FUTURE_MARGIN_SECONDS = 86400.0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Loading makes many objects and no reference cycles: pausing the cyclic garbage collector meanwhile
    saves it from re-scanning the growing heap (a quarter of a large start-up)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class ItemReconciler:
    """Reads what changed in the item files into the index database, and feeds the subscribed indexes."""

    def __init__(self, state: StoreState, queries: ItemQueries, changes: FolderChanges | None) -> None:
        """`changes`: which item files changed since the last check (without it, each check `stat`s them all)."""
        self._state = state
        self._queries = queries
        self._changes = changes
        paths = state.rows.paths
        self._episodic_dir = paths.episodic_dir
        self._items_dir = paths.items_dir
        self._layer_files = (paths.semantic_file, paths.procedural_file)
        # The item files on disk with their signatures, as of the last check.
        self._on_disk: dict[Path, FileSignature] | None = None
        # Files found changed but left unread (the bot's own changes to them were pending): looked at next time.
        self._unsettled: set[Path] = set()
        self._skipped: dict[Path, int] = {}
        self._opened = False
        # How many times a file was read and parsed (a restart with an up-to-date index reads none).
        self.files_read = 0

    @property
    def skipped_lines(self) -> int:
        """Lines of the item files that are not valid items (kept in their files, left out of memory)."""
        return sum(self._skipped.values())

    def refresh_sync(self) -> bool:
        """Re-read every file that changed on disk since last seen; True when anything changed."""
        db = self._state.db
        if db.broken:
            log.warning("[Memory] Index %s failed; rebuilding it from the item files", db.path)
            self._rebuild()
        try:
            return self._refresh()
        except sqlite3.DatabaseError as error:
            log.warning("[Memory] Index %s failed (%s); rebuilding it from the item files", db.path, error)
            self._rebuild()
            return self._refresh()

    def _rebuild(self) -> None:
        self._state.db.reset()
        self._forget_loaded()

    def _forget_loaded(self) -> None:
        """Start over as if nothing had been read (the database is empty again)."""
        state = self._state
        self._on_disk = None
        self._opened = state.fed = False
        state.signatures.clear()
        state.written.clear()
        self._skipped.clear()
        state.known_files.clear()
        state.caches.forget_all()
        state.caches.facts.clear()
        state.count = 0
        state.caches.bump()
        for index in state.indexes:
            index.clear()

    def _open(self) -> None:
        """Read what the database knows of the files: their signatures (None: re-read it)."""
        state = self._state
        state.db.take_made_afresh()
        for name, mtime, size, inode, skipped in state.db.read(index_sql.file_states):
            path = state.rows.path_of(name)
            state.known_files.add(path)
            self._skipped[path] = skipped
            if mtime is not None and size is not None and inode is not None:
                state.signatures[path] = (mtime, size, inode)
        state.count = state.db.read(index_sql.count_items)
        with _collector_paused():
            state.db.read(lambda connection: state.caches.facts.load(index_sql.all_facts(connection)))
        self._opened = True

    def _refresh(self) -> bool:
        try:
            return self._refresh_files()
        except BaseException:
            self._on_disk = None  # the events this check took are gone: the next one checks every file
            raise

    def _refresh_files(self) -> bool:
        state = self._state
        present, suspects = self._files_on_disk()
        if self._opened and state.db.take_made_afresh():
            # Closed, then reopened on a database made afresh (it was lost or unreadable meanwhile): the
            # rows read before are gone, so every file is read again.
            log.warning("[Memory] Index %s was lost while closed; reading the item files again", state.db.path)
            self._forget_loaded()
            suspects = None
        if not self._opened:
            if not present and not state.db.exists:
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
        for path in list(state.known_files if suspects is None else suspects & state.known_files):
            if path not in present:
                if state.pending(path):
                    self._unsettled.add(path)
                else:
                    self._drop_file(path)
                    changed = True
        checked = present if suspects is None else {path: present[path] for path in suspects if path in present}
        stale = [path for path, signature in checked.items() if state.signatures.get(path) != signature]
        if stale:
            with _collector_paused():
                # Loaded in name order, so the later file wins for an id found twice (see `relocate`).
                for path in sorted(stale, key=str):
                    if state.pending(path):
                        self._unsettled.add(path)
                    else:
                        self._load_file(path, present[path])
                        changed = True
        if not state.fed:
            state.fed = True
            if state.indexes:
                self.feed(state.indexes)
        return changed

    def feed(self, indexes: Sequence[ItemIndex]) -> None:
        """Give `indexes` every active item in the database, a batch at a time."""
        for batch in self._queries.stream(active=True):
            for index in indexes:
                index.add_many(batch)

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
                        suspect = self._state.rows.path_of("episodic/" + path.name)
                        self._recheck(known, suspect, path.name.endswith(".jsonl"))
                        suspects.add(suspect)
                    for path in in_items:
                        self._recheck(known, path, path in self._layer_files)
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
                        found[self._state.rows.path_of("episodic/" + entry.name)] = (
                            status.st_mtime_ns,
                            status.st_size,
                            status.st_ino,
                        )
        except FileNotFoundError:
            pass
        for path in self._layer_files:
            signature = file_signature(path)
            if signature is not None:
                found[path] = signature
        return found

    def _load_file(self, path: Path, signature: FileSignature) -> None:
        state, rows = self._state, self._state.rows
        name = rows.name(path)
        parsed = parse_item_file(read_raw(path), path, rows.zone)
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
            # An id is given once in a parsed file: an earlier line with it is a kept line (`parse_item_file`).
            item, line = next(items), next(lines).encode("utf-8", "surrogateescape")
            loaded[item.id] = (item, line, pos)
        before = state.db.read(index_sql.ids_in_file, name)
        # An id also found in another file: this one wins (see `relocate`).
        elsewhere = state.db.read(index_sql.ids_in_other_files, name, list(loaded))

        written = [rows.row(item, name, pos, line) for item, line, pos in loaded.values()]
        _say_future_dates(path, written)

        def write(connection: sqlite3.Connection) -> None:
            index_sql.delete_file_rows(connection, name)
            index_sql.delete_refs(connection, [*before, *elsewhere])
            index_sql.insert_items(connection, written)
            index_sql.insert_kept(connection, kept)
            state.write_refs(connection, (item for item, _, _ in loaded.values()))
            index_sql.record_file_read(
                connection, name, signature, parsed.skipped, parsed.unterminated, len(parsed.layout)
            )

        state.transaction(write)
        state.caches.facts.remove(before)
        state.caches.facts.put(map(rows.facts, written))
        state.count += len(loaded) - len(before) - len(elsewhere)
        state.tell_removed([*before, *elsewhere])
        if state.fed:
            state.tell_added([item for item, _, _ in loaded.values()])
        state.known_files.add(path)
        self._skipped[path] = parsed.skipped
        state.signatures[path] = signature
        state.caches.bump()

    def _drop_file(self, path: Path) -> None:
        state = self._state
        name = state.rows.name(path)
        ids = state.db.read(index_sql.ids_in_file, name)

        def write(connection: sqlite3.Connection) -> None:
            index_sql.delete_file(connection, name)
            index_sql.delete_refs(connection, ids)

        state.transaction(write)
        state.caches.facts.remove(ids)
        state.count -= len(ids)
        state.tell_removed(ids)
        state.known_files.discard(path)
        state.signatures.pop(path, None)
        self._skipped.pop(path, None)
        state.caches.bump()


def _say_future_dates(path: Path, rows: list[tuple[object, ...]]) -> None:
    """One warning per item of a file read that is dated in the future: it counts as new until that date (its
    recency is not below an item's of now), so a year typed wrong keeps it at the top of what is recalled."""
    future = time.time() + FUTURE_MARGIN_SECONDS
    for row in rows:
        latest = ItemRows.latest_date(row)
        if latest > future:
            log.warning(
                "[Memory] Item %s of %s is dated %s, in the future: it counts as new until then (used, and kept as "
                "written; correct the date if it is a slip)",
                row[0], path, datetime.fromtimestamp(latest, UTC).isoformat(),
            )  # fmt: skip

"""`ItemWrites`: the write path of `MemoryItemStore` (append, replace, relocate, remove, flush).

Changes are made to the index database first and written to the files by `flush`, which callers await
after releasing the scope's lock: concurrent turns then share one durable write (group commit) instead
of queueing for an fsync each. Appends go through `append_lines`; every other change rewrites the whole
file with `write_atomic`. The database is never ahead of the truth: a file with changes not yet written
has no signature in it, so a crash before the write makes the next start re-read that file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from bot.domain.memory import MemoryItem
from bot.memory import index_sql
from bot.memory.item_queries import ItemQueries
from bot.memory.item_state import StoreState
from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, file_signature, write_atomic


class ItemWrites:
    """Every change of the items of one scope, and the flush that writes it to their files."""

    def __init__(self, state: StoreState, queries: ItemQueries, deferred: DeferredSync | None) -> None:
        """`deferred`: where an append of new items leaves its fsync (their turn is in the archive, and a
        turn no item refers to is recorded again before a compaction); rewrites are always durable."""
        self._state = state
        self._queries = queries
        self._deferred = deferred
        self._flush_lock = asyncio.Lock()

    def append(self, items: list[MemoryItem]) -> None:
        """Add new items (written by the next `flush`, one durable append per file)."""
        state, rows = self._state, self._state.rows
        placed: list[tuple[MemoryItem, Path]] = []
        written: list[tuple[object, ...]] = []
        # Whether every item is new (an id stored before moves to the end of its new file: not a pure append).
        appended = True

        def write(connection: sqlite3.Connection) -> None:
            nonlocal appended
            for item in items:
                path = rows.file_for(item)
                if index_sql.has_item(connection, item.id):
                    index_sql.delete_refs(connection, [item.id])
                    appended = False
                else:
                    state.count += 1
                row = rows.row(item, rows.name(path), state.next_pos(connection, path), rows.line_of(item))
                index_sql.insert_item(connection, row)
                state.write_refs(connection, [item])
                placed.append((item, path))
                written.append(row)

        state.transaction(write)
        state.caches.facts.put(map(rows.facts, written))
        for item, path in placed:
            state.pending_appends.setdefault(path, []).append(item.id)
            for index in state.indexes:
                index.add(item)
        state.caches.changed(items, appended=appended)

    def replace(self, items: list[MemoryItem]) -> None:
        """Store changed versions of existing items (the next `flush` rewrites their files atomically)."""
        state, rows = self._state, self._state.rows
        paths: list[Path] = []
        written: list[tuple[object, ...]] = []

        def write(connection: sqlite3.Connection) -> None:
            for item in items:
                place = index_sql.place_of(connection, item.id)
                if place is None:
                    raise KeyError(item.id)
                name, pos = place
                path = rows.path_of(name)
                state.mark_unwritten(connection, path)
                row = rows.row(item, name, pos, rows.line_of(item))
                index_sql.insert_item(connection, row)
                index_sql.delete_refs(connection, [item.id])
                state.write_refs(connection, [item])
                paths.append(path)
                written.append(row)

        state.transaction(write)
        state.caches.facts.put(map(rows.facts, written))
        state.tell_replaced(items)
        state.pending_rewrites.update(paths)
        state.caches.changed(items)

    def relocate(self, item: MemoryItem) -> None:
        """Move an existing item to the file its (changed) layer belongs in.

        `flush` appends to the new file before rewriting the old one, so a crash in between leaves
        the item twice with one id (the later file wins on load), never lost.
        """
        state, rows = self._state, self._state.rows
        new_path = rows.file_for(item)
        old: list[Path] = []
        written: list[tuple[object, ...]] = []

        def write(connection: sqlite3.Connection) -> None:
            place = index_sql.place_of(connection, item.id)
            if place is None:
                raise KeyError(item.id)
            old_path = rows.path_of(place[0])
            state.mark_unwritten(connection, old_path)
            pos = state.next_pos(connection, new_path)
            row = rows.row(item, rows.name(new_path), pos, rows.line_of(item))
            index_sql.insert_item(connection, row)
            index_sql.delete_refs(connection, [item.id])
            state.write_refs(connection, [item])
            old.append(old_path)
            written.append(row)

        state.transaction(write)
        state.caches.facts.put(map(rows.facts, written))
        state.tell_replaced([item])
        state.pending_appends.setdefault(new_path, []).append(item.id)
        state.pending_rewrites.add(old[0])
        state.caches.changed([item])

    def remove(self, item_ids: list[str]) -> list[MemoryItem]:
        """Delete items from the store and every index (the next `flush` rewrites their files atomically)."""
        state = self._state
        found = self._queries.get_many(item_ids)
        removed = [found[item_id] for item_id in dict.fromkeys(item_ids) if item_id in found]
        paths: list[Path] = []

        def write(connection: sqlite3.Connection) -> None:
            for item in removed:
                name = index_sql.delete_item(connection, item.id)
                if name is not None:
                    path = state.rows.path_of(name)
                    state.mark_unwritten(connection, path)
                    paths.append(path)
            index_sql.delete_refs(connection, [item.id for item in removed])

        state.transaction(write)
        state.caches.facts.remove(item.id for item in removed)
        state.count -= len(paths)
        state.caches.bump()
        state.tell_removed([item.id for item in removed])
        state.pending_rewrites.update(paths)
        return removed

    @property
    def dirty(self) -> bool:
        return bool(self._state.pending_appends or self._state.pending_rewrites)

    async def flush(self, durable: bool = True) -> None:
        """Write every pending change: appends first, then whole-file rewrites.

        Concurrent callers share the work (group commit): whoever flushes writes everything pending
        at that moment, and a caller whose changes were taken by a flush in progress returns when
        that flush is done. Each file's content is taken when the flush starts, so it is consistent.
        `durable=False` (a turn's own record, which the archive holds) leaves the fsync of appends to
        the `DeferredSync` given at construction, unless rewrites follow them: an item moved between
        files is on disk in its new file before its old file is rewritten without it.
        """
        state = self._state
        async with self._flush_lock:
            appends, rewrites = state.pending_appends, state.pending_rewrites
            state.pending_appends, state.pending_rewrites = {}, set()
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
            state.writing = set(appends) | rewrites
            deferred = None if durable or rewrite_jobs else self._deferred
            try:
                for path, lines in append_jobs:
                    # Changed by hand since last read (while the bot's append was pending): what the append
                    # leaves is read again, the hand edit with it.
                    edited = file_signature(path) != state.signatures.get(path)
                    await append_lines(path, lines, deferred)
                    self._after_write(path, edited)
                for path, data in rewrite_jobs:
                    await write_atomic(path, data)
                    self._after_write(path)
            except BaseException:
                # Not written: keep it pending so the next flush tries again.
                self._keep_pending(appends, rewrites)
                raise
            finally:
                state.writing = set()
            if durable and self._deferred is not None:
                # What this caller changed may have gone out with a flush that left its fsync for later.
                await self._deferred.sync()

    def _keep_pending(self, appends: dict[Path, list[str]], rewrites: set[Path]) -> None:
        for path, ids in appends.items():
            self._state.pending_appends.setdefault(path, [])[:0] = ids
        self._state.pending_rewrites |= rewrites

    def _unterminated(self, path: Path) -> bool:
        if path in self._state.written:
            return False  # the bot wrote it last, ending every line
        return self._state.db.read(index_sql.is_unterminated, self._state.rows.name(path))

    def _lines_of(self, path: Path, item_ids: list[str]) -> list[str]:
        """The lines to append to `path`: the items of `item_ids` still stored there, in that order."""
        lines = self._state.db.read(index_sql.lines_in_file, self._state.rows.name(path), item_ids)
        return [
            lines[item_id].decode("utf-8", "surrogateescape") for item_id in dict.fromkeys(item_ids) if item_id in lines
        ]

    def _file_bytes(self, path: Path) -> bytes:
        """The file's new text: its items and kept lines in their places (items added since at the end)."""
        lines = self._state.db.read(index_sql.file_lines, self._state.rows.name(path))
        return b"".join(line + b"\n" for line in lines)

    def _after_write(self, path: Path, edited: bool = False) -> None:
        """Record the file as written; `edited`: it holds lines the index has not read (the next refresh
        reads it)."""
        state = self._state
        signature = file_signature(path)
        if signature is None:
            return
        # The bot ends every line it writes; a file changed again since this flush began stays unwritten.
        changing = edited or path in state.pending_appends or path in state.pending_rewrites
        with state.db.lock:
            state.written[path] = None if changing else signature
        if edited:
            state.signatures.pop(path, None)
        else:
            state.signatures[path] = signature

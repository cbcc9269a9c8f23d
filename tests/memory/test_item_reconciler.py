"""The reconciler keeps the index database in step with the item files: a hand edit with a bad line is
taken up with the line skipped, logged and kept; a file shrunk, replaced or deleted under the store is
read again; a file with the bot's own changes pending is left for after the flush."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME, IndexDatabase
from bot.memory.item_caches import ItemCaches
from bot.memory.item_queries import ItemQueries
from bot.memory.item_reconciler import ItemReconciler
from bot.memory.item_state import ItemRows, StoreState
from bot.memory.item_writes import ItemWrites
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths
from tests.memory.helpers import item, write_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = MemoryLayer.SEMANTIC
BAD_LINE = '{"id": "broken", "layer": "SEMANTIC", "content": '


class RecordingIndex:
    """An `ItemIndex` that keeps the ids it was told of."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def add(self, item: MemoryItem) -> None:
        self.ids.add(item.id)

    def add_many(self, items: list[MemoryItem]) -> None:
        self.ids.update(entry.id for entry in items)

    def remove(self, item_id: str) -> None:
        self.ids.discard(item_id)

    def clear(self) -> None:
        self.ids.clear()


class Parts:
    """The store's parts over one scope's files, built as the facade builds them."""

    def __init__(self, root: Path) -> None:
        self.paths = MemoryPaths(root)
        db = IndexDatabase(self.paths.index_dir / INDEX_FILE_NAME, UTC)
        self.state = StoreState(db, ItemRows(self.paths, UTC), ItemCaches())
        self.index = RecordingIndex()
        self.state.indexes.append(self.index)
        self.queries = ItemQueries(db, self.state.rows, self.state.caches)
        self.reconciler = ItemReconciler(self.state, self.queries, None)
        self.writes = ItemWrites(self.state, self.queries, None)

    def ids(self) -> set[str]:
        return {entry.id for entry in self.queries.items()}


def later(path: Path) -> None:
    """A distinct mtime even within one filesystem timestamp tick."""
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_a_hand_edit_with_a_bad_line_is_taken_up_and_the_line_skipped_logged_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parts = Parts(tmp_path)
    write_items(parts.paths.semantic_file, [item(S, "The dog is called Rex.", NOW, item_id="m1")])
    assert parts.reconciler.refresh_sync()
    assert parts.ids() == parts.index.ids == {"m1"}

    # Someone adds a line by hand that is not an item, then a good one after it.
    with parts.paths.semantic_file.open("a", encoding="utf-8") as handle:
        handle.write(BAD_LINE + "\n")
        handle.write(dumps_line(item(S, "The cat is called Tom.", NOW, item_id="m2").to_json_dict()) + "\n")
    later(parts.paths.semantic_file)
    with caplog.at_level(logging.WARNING):
        assert parts.reconciler.refresh_sync()

    assert parts.ids() == parts.index.ids == {"m1", "m2"}
    assert parts.reconciler.skipped_lines == 1
    assert any(str(parts.paths.semantic_file) in record.getMessage() for record in caplog.records), caplog.text
    # A rewrite of the file (m1 changed) puts the bad line back at its place, byte for byte.
    changed = parts.queries.get("m1")
    assert changed is not None
    parts.writes.replace([changed.model_copy(update={"content": "The dog is called Bolt."})])
    asyncio.run(parts.writes.flush())
    lines = parts.paths.semantic_file.read_text(encoding="utf-8").splitlines()
    assert lines[1] == BAD_LINE and "Bolt" in lines[0] and '"m2"' in lines[2]


def test_a_file_shrunk_under_the_store_loses_the_items_it_no_longer_holds(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    write_items(parts.paths.semantic_file, [item(S, f"fact number {n}", NOW, item_id=f"m{n}") for n in range(3)])
    parts.reconciler.refresh_sync()
    assert len(parts.state.known_files) == 1 and parts.state.count == 3

    first_line = parts.paths.semantic_file.read_text(encoding="utf-8").splitlines()[0]
    parts.paths.semantic_file.write_text(first_line + "\n", encoding="utf-8")
    later(parts.paths.semantic_file)
    assert parts.reconciler.refresh_sync()

    assert parts.ids() == parts.index.ids == {"m0"}
    assert parts.state.count == 1


def test_a_file_replaced_under_the_store_is_read_again_and_a_deleted_one_dropped(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    write_items(parts.paths.semantic_file, [item(S, "old fact", NOW, item_id="old")])
    write_items(parts.paths.procedural_file, [item(MemoryLayer.PROCEDURAL, "run make", NOW, item_id="p1")])
    parts.reconciler.refresh_sync()

    # Another file moved over it (a new inode), then the procedural file deleted.
    replacement = tmp_path / "replacement.jsonl"
    write_items(replacement, [item(S, "new fact", NOW, item_id="new")])
    os.replace(replacement, parts.paths.semantic_file)
    parts.paths.procedural_file.unlink()
    assert parts.reconciler.refresh_sync()

    assert parts.ids() == parts.index.ids == {"new"}
    assert parts.state.count == 1 and parts.state.known_files == {parts.paths.semantic_file}
    assert not parts.reconciler.refresh_sync()  # nothing changed since


def test_a_file_with_the_bots_changes_pending_is_read_after_they_are_written(tmp_path: Path) -> None:
    parts = Parts(tmp_path)
    write_items(parts.paths.semantic_file, [item(S, "first fact", NOW, item_id="m1")])
    parts.reconciler.refresh_sync()
    parts.writes.append([item(S, "the bot's fact", NOW, item_id="mine")])
    # A hand edit lands before the bot's append is flushed: reading it now would lose the bot's item.
    write_items(parts.paths.semantic_file, [item(S, "a hand-written fact", NOW, item_id="hand")])
    later(parts.paths.semantic_file)
    assert not parts.reconciler.refresh_sync()
    assert parts.ids() == {"m1", "mine"}

    asyncio.run(parts.writes.flush())
    assert parts.reconciler.refresh_sync()
    assert parts.ids() == parts.index.ids == {"m1", "mine", "hand"}

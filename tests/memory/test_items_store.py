"""The JSONL files are the truth: hand edits, deletions and torn lines are picked up; rewrites are atomic."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from bot.domain.memory import MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.workspace import MemoryPaths
from tests.memory.helpers import item, read_items, write_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = MemoryLayer.SEMANTIC


def touch_later(path: Path) -> None:
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def loaded(tmp_path: Path) -> tuple[MemoryItemStore, Bm25Index, MemoryPaths]:
    paths = MemoryPaths(tmp_path)
    store = MemoryItemStore(paths, UTC)
    index = Bm25Index()
    store.subscribe(index)
    store.refresh_sync()
    return store, index, paths


def test_a_hand_edited_line_replaces_the_item_in_the_store_and_the_index(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The dog is called Rex.", NOW, item_id="m1")])
    store, index, _ = loaded(tmp_path)
    assert list(index.search("rex", 5)) == ["m1"]

    paths.semantic_file.write_text(paths.semantic_file.read_text().replace("Rex", "Bolt"))
    touch_later(paths.semantic_file)
    assert store.refresh_sync()
    stored = store.get("m1")
    assert stored is not None and stored.content == "The dog is called Bolt."
    assert index.search("rex", 5) == {} and list(index.search("bolt", 5)) == ["m1"]


def test_deleted_lines_and_files_disappear(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "one fact", NOW, item_id="m1"), item(S, "two fact", NOW, item_id="m2")])
    write_items(paths.procedural_file, [item(MemoryLayer.PROCEDURAL, "run make", NOW, item_id="m3")])
    store, index, _ = loaded(tmp_path)
    assert len(store) == 3

    paths.semantic_file.write_text(paths.semantic_file.read_text().splitlines()[1] + "\n")
    touch_later(paths.semantic_file)
    paths.procedural_file.unlink()
    store.refresh_sync()
    assert [i.id for i in store.items()] == ["m2"]
    assert index.search("fact make", 5).keys() == {"m2"}


def test_unreadable_and_torn_lines_are_skipped(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "good one", NOW, item_id="m1")])
    with paths.semantic_file.open("a") as handle:
        handle.write('{"not": "an item"}\nnot json at all\n{"id": "m2", "layer": "SEMANTIC", "ty')
    store, _, _ = loaded(tmp_path)
    assert [i.id for i in store.items()] == ["m1"]


async def test_rewrites_keep_unknown_keys_and_leave_no_temp_files(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "kept", NOW, item_id="m1", myNote="by hand")])
    store, _, _ = loaded(tmp_path)
    stored = store.get("m1")
    assert stored is not None
    store.replace([stored.model_copy(update={"pinned": True})])
    await store.flush()
    [record] = read_items(paths.semantic_file)
    assert record["pinned"] is True and record["myNote"] == "by hand"
    assert [p.name for p in paths.items_dir.iterdir()] == ["semantic.jsonl"]


async def test_a_hand_edit_made_before_an_append_is_kept(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "first", NOW, item_id="m1")])
    store, _, _ = loaded(tmp_path)
    write_items(paths.semantic_file, [item(S, "added by hand", NOW, item_id="m2")])
    touch_later(paths.semantic_file)
    store.refresh_sync()
    store.append([item(S, "added by the bot", NOW, item_id="m3")])
    await store.flush()
    assert [r["id"] for r in read_items(paths.semantic_file)] == ["m1", "m2", "m3"]


def test_an_index_lost_while_the_store_was_closed_is_filled_from_the_files_again(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", NOW, item_id="m1")])
    store, index, _ = loaded(tmp_path)
    store.close()
    database = paths.index_dir / INDEX_FILE_NAME
    for path in database.parent.glob(f"{INDEX_FILE_NAME}*"):
        if not path.name.endswith(".lock"):
            path.unlink()

    store.refresh_sync()
    assert len(store) == 1 and [entry.id for entry in store.items()] == ["m1"]
    assert list(index.search("marlin", 5)) == ["m1"]
    assert store.files_read == 2

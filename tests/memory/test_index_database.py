"""The index database (`memory/index/items.sqlite3`) is derived from the item files, never the truth.

A restart reads no file that did not change; a hand edit, a deleted or a corrupt database, and a crash
before a write all end with the files' content in the prompt; kept lines survive every rewrite.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME
from bot.memory.item_files import parse_items
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.settings import MemoryConfig
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import item, memory_section, say, write_items

NOW = datetime.now(UTC)
DAY = NOW - timedelta(days=20)
S = MemoryLayer.SEMANTIC


def seed_days(services: Application, days: int = 5) -> None:
    """A few day files of exchanges, as an earlier run of the bot left them."""
    for number in range(days):
        at = DAY - timedelta(days=number)
        contents = [f"User: Note {number}-{n} about the garden shed. | Assistant: Noted." for n in range(3)]
        items = [item(MemoryLayer.EPISODIC, content, at, type_="turn") for content in contents]
        write_items(services.workspace.memory.episodic_file(at.date()), items)
    write_items(services.workspace.memory.semantic_file, [item(S, "The boat is called Marlin.", DAY)])


def touch_later(path: Path) -> None:
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


async def store_of(services: Application) -> MemoryItemStore:
    scope = await services.memory.scope(MemoryConfig(), "test:1")
    async with services.memory.fresh(scope):
        store = scope.store
    assert isinstance(store, MemoryItemStore)  # the files' store, whose reads are counted
    return store


async def test_a_restart_reads_no_unchanged_file_and_a_hand_edit_reaches_the_next_prompt(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    first = Application(env_for(workspace_dir, fake_openai))
    seed_days(first)
    await say(first, channel, "1", "what is the boat called?")
    assert "Marlin" in (memory_section(fake_openai.system_prompts()[-1]) or "")
    assert (await store_of(first)).files_read == 6  # five days and semantic.jsonl (the bot wrote today's)
    await first.stop()
    assert (first.workspace.memory.index_dir / INDEX_FILE_NAME).is_file()

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        await say(again, channel, "1", "what is the boat called?")
        store = await store_of(again)
        assert store.files_read == 0  # every file as the index last saw it: none read again
        assert "Marlin" in (memory_section(fake_openai.system_prompts()[-1]) or "")

        semantic = again.workspace.memory.semantic_file
        semantic.write_text(semantic.read_text().replace("Marlin", "Seagull"))
        touch_later(semantic)
        await say(again, channel, "1", "what is the boat called?")
        section = memory_section(fake_openai.system_prompts()[-1]) or ""
        assert "Seagull" in section and "Marlin" not in section
        assert store.files_read == 1
    finally:
        await again.stop()


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
async def test_a_deleted_or_corrupt_index_database_is_rebuilt_from_the_files(
    damage: str,
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = Application(env_for(workspace_dir, fake_openai))
    seed_days(first)
    await say(first, channel, "1", "remember that the shed key hangs by the door")
    await first.stop()
    database = first.workspace.memory.index_dir / INDEX_FILE_NAME
    for suffix in ("-wal", "-shm"):
        database.with_name(database.name + suffix).unlink(missing_ok=True)
    if damage == "deleted":
        database.unlink()
    else:
        database.write_bytes(b"not a database at all " * 400)

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        with caplog.at_level(logging.WARNING):
            await say(again, channel, "1", "what is the boat called?")
        assert "Marlin" in (memory_section(fake_openai.system_prompts()[-1]) or "")
        store = await store_of(again)
        on_disk = {
            entry.id
            for path in again.workspace.memory.items_dir.rglob("*.jsonl")
            for entry in parse_items(path.read_text(), path)
        }
        assert {entry.id for entry in store.items()} == on_disk and len(on_disk) > 5 * 3 + 1
        if damage == "corrupt":
            assert any("unreadable" in record.getMessage() for record in caplog.records)
            assert list(database.parent.glob(f"{INDEX_FILE_NAME}.corrupt-*"))
    finally:
        await again.stop()


async def test_an_index_that_fails_while_running_is_rebuilt_on_the_next_message(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    seed_days(services)
    await say(services, channel, "1", "what is the boat called?")
    store = await store_of(services)
    store.close()
    database = services.workspace.memory.index_dir / INDEX_FILE_NAME
    database.write_bytes(b"garbage " * 4096)  # damaged under the running bot
    await say(services, channel, "1", "what is the boat called?")  # may fall back to the notes once
    await say(services, channel, "1", "what is the boat called?")
    assert "Marlin" in (memory_section(fake_openai.system_prompts()[-1]) or "")


def test_a_crash_before_the_write_leaves_the_files_the_truth(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", DAY, item_id="m1")])
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    stored = store.get("m1")
    assert stored is not None
    store.replace([stored.model_copy(update={"content": "The boat is called Seagull."})])
    store.append([item(S, "The car is red.", DAY, item_id="m2")])
    store.close()  # the process dies here: the database has the change, the file does not

    reopened = MemoryItemStore(paths, UTC)
    lexical = Bm25Index()
    reopened.subscribe(lexical)
    reopened.refresh_sync()
    assert reopened.files_read == 1  # the changed file is not trusted: read again
    again = reopened.get("m1")
    assert again is not None and again.content == "The boat is called Marlin."
    assert reopened.get("m2") is None and len(reopened) == 1
    assert list(lexical.search("marlin", 5)) == ["m1"] and lexical.search("seagull car", 5) == {}


async def test_the_bots_own_appends_are_recorded_at_the_next_transaction_or_close_and_reread_after_a_crash(
    tmp_path: Path,
) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", DAY, item_id="m1")])
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    commits: list[str] = []
    store._db.connection.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    for turn in range(3):
        store.append([item(MemoryLayer.EPISODIC, f"turn {turn} about the boat", DAY, item_id=f"t{turn}")])
        await store.flush(durable=False)
    assert len(commits) == 3  # one a turn: the append's, which also records the write before it
    store._db.close()  # the process dies: the last append's write was never recorded

    reopened = MemoryItemStore(paths, UTC)
    reopened.refresh_sync()
    assert reopened.files_read == 1  # the day file is read again, not trusted
    assert [entry.id for entry in reopened.in_layer(MemoryLayer.EPISODIC)] == ["t0", "t1", "t2"]
    reopened.append([item(MemoryLayer.EPISODIC, "turn 3 about the boat", DAY, item_id="t3")])
    await reopened.flush(durable=False)
    reopened.close()  # a clean stop records it

    again = MemoryItemStore(paths, UTC)
    again.refresh_sync()
    assert again.files_read == 0 and len(again) == 5
    again.close()


async def test_kept_lines_and_unchanged_items_are_written_back_byte_for_byte_after_a_restart(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    paths.items_dir.mkdir(parents=True)
    # A hand-written item (no fingerprint, a time without a zone, spacing of its own), a bad line, and
    # bytes that are not UTF-8: none of them is the bot's to reformat.
    hand = b'{"id": "m1", "layer": "SEMANTIC", "type": "fact", "content": "Tea, no sugar.", "createdAt": "2026-01-02T10:00:00", "updatedAt": "2026-01-02T10:00:00", "confidence": 0.9, "salience": 0.5}'  # noqa: E501
    bad = b'{"layer": "NOPE", "content": "caf\xe9"}'
    other = item(S, "The boat is called Marlin.", DAY, item_id="m2")
    paths.semantic_file.write_bytes(hand + b"\n" + bad + b"\n" + dumps_line(other.to_json_dict()).encode() + b"\n")
    first = MemoryItemStore(paths, UTC)
    first.refresh_sync()
    first.close()

    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    assert store.files_read == 0 and store.skipped_lines == 1
    boat = store.get("m2")
    assert boat is not None
    store.replace([boat.model_copy(update={"pinned": True})])
    await store.flush()
    lines = paths.semantic_file.read_bytes().split(b"\n")
    assert lines[0] == hand and lines[1] == bad and b'"pinned":true' in lines[2] and lines[3] == b""
    store.close()

    third = MemoryItemStore(paths, UTC)
    third.refresh_sync()
    assert third.files_read == 0  # the bot's own write was recorded: nothing to read again
    pinned = third.pinned()
    assert [entry.id for entry in pinned] == ["m2"]


async def test_a_second_process_reads_the_files_into_its_own_index_and_never_puts_old_rows_back(
    tmp_path: Path,
) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", DAY, item_id="m1")])
    bot = MemoryItemStore(paths, UTC)  # the running bot owns the index
    bot.refresh_sync()
    stored = bot.get("m1")
    assert stored is not None
    bot.replace([stored.model_copy(update={"content": "The boat is called Seagull."})])  # not written yet

    status = MemoryItemStore(paths, UTC)  # `python -m bot status` meanwhile
    status.refresh_sync()
    seen = status.get("m1")
    assert seen is not None and seen.content == "The boat is called Marlin."  # what the file says now
    status.close()

    await bot.flush()
    written = bot.get("m1")
    assert written is not None and written.content == "The boat is called Seagull."
    assert "Seagull" in paths.semantic_file.read_text()
    bot.close()
    reopened = MemoryItemStore(paths, UTC)
    reopened.refresh_sync()
    assert reopened.files_read == 0
    again = reopened.get("m1")
    assert again is not None and again.content == "The boat is called Seagull."


def test_a_database_of_an_older_layout_is_rebuilt_not_kept_aside_as_corrupt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", DAY, item_id="m1")])
    database = paths.index_dir / INDEX_FILE_NAME
    database.parent.mkdir(parents=True)
    older = sqlite3.connect(database)  # an earlier version's: its items table lacks columns this one indexes
    older.executescript(
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
        "INSERT INTO meta VALUES ('schema', '1'), ('zone', 'UTC');"
        "CREATE TABLE items (id TEXT PRIMARY KEY, file TEXT NOT NULL, line BLOB NOT NULL);"
    )
    older.close()

    store = MemoryItemStore(paths, UTC)
    with caplog.at_level(logging.INFO):
        store.refresh_sync()
    assert [entry.id for entry in store.items()] == ["m1"] and store.files_read == 1
    assert any("another version" in record.getMessage() for record in caplog.records)
    assert not list(database.parent.glob(f"{INDEX_FILE_NAME}.corrupt-*"))
    store.close()

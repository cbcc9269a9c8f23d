"""The item store's behaviour on both of its implementations: the workspace's JSONL files (`MemoryItemStore`)
and PostgreSQL's rows (`DatabaseItemStore`, with `BOT_DATABASE_URL`).

Each test runs on both: items written are there for the next process, a hand edit (of the file, or of the
row in SQL) is seen on the next refresh and searched by its new words, a corrupt line or row is kept and
left out of memory, and what a process forgets is gone. Then what only a database does: two processes
sharing one scope see each other's writes, a vector is made once whichever process needs it, and
`bot migrate` and `bot export` move the item files in and out with every line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import asyncpg  # type: ignore[import-untyped]
import numpy as np
import pytest

from bot.app import Application
from bot.database.connection import Database
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.item_storage import ItemStore
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.memory.postgres_items import COPIES_PREFIX, ItemRowsInDatabase
from bot.memory.scopes import MemoryScopes
from bot.memory.vector_cache import VectorCache
from bot.workspace import MemoryPaths, Workspace
from tests.command_line import run_main
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, read_items, say, write_items
from tests.memory.test_indexing import embedded_texts
from tests.postgres_server import OpenDatabases
from tests.test_cli import bot_env

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = MemoryLayer.SEMANTIC


class Backend(Protocol):
    """Where a scope's items are kept, as a test sees it: a process's store of them, and hand edits."""

    def open(self) -> ItemStore:
        """The store a new process would open on the scope."""
        ...

    async def seed(self, items: list[MemoryItem]) -> None:
        """Items that were there before any process started (a workspace's file, or rows migrated in)."""
        ...

    async def edit_text(self, item_id: str, old: str, new: str) -> None:
        """A person replacing words in one item, by hand."""
        ...

    async def add_corrupt(self, text: str) -> None:
        """A person adding a line (or row) to the semantic file that is not a valid item."""
        ...

    async def raw_lines(self) -> list[str]:
        """Everything the semantic file holds, item or not."""
        ...


class Files:
    def __init__(self, root: Path) -> None:
        self.paths = MemoryPaths(root)

    def open(self) -> ItemStore:
        return MemoryItemStore(self.paths, UTC)

    async def seed(self, items: list[MemoryItem]) -> None:
        write_items(self.paths.semantic_file, items)

    async def edit_text(self, item_id: str, old: str, new: str) -> None:
        path = self.paths.semantic_file
        lines = [line.replace(old, new) if f'"{item_id}"' in line else line for line in path.read_text().splitlines()]
        path.write_text("\n".join(lines) + "\n")
        stamp = path.stat().st_mtime_ns + 1_000_000_000  # a distinct mtime within one timestamp tick
        os.utime(path, ns=(stamp, stamp))

    async def add_corrupt(self, text: str) -> None:
        with self.paths.semantic_file.open("a") as handle:
            handle.write(text + "\n")

    async def raw_lines(self) -> list[str]:
        return self.paths.semantic_file.read_text().splitlines()


class Rows:
    def __init__(self, database: Database, url: str) -> None:
        self.items = ItemRowsInDatabase(database)
        self.url = url
        self.scope = f"chats/test:{uuid.uuid4().hex[:8]}"

    def open(self) -> ItemStore:
        return self.items.store(self.scope, UTC, None)

    async def _sql(self, statement: str, *args: object) -> list[asyncpg.Record]:
        connection = await asyncpg.connect(self.url)
        try:
            return list(await connection.fetch(statement, *args))
        finally:
            await connection.close()

    async def seed(self, items: list[MemoryItem]) -> None:
        for each in items:
            await self._sql(
                "INSERT INTO memory_items (scope, file, item) VALUES ($1, 'semantic.jsonl', $2::jsonb)",
                self.scope, json.dumps(each.to_json_dict()),
            )  # fmt: skip

    async def edit_text(self, item_id: str, old: str, new: str) -> None:
        await self._sql(
            "UPDATE memory_items SET item = jsonb_set(item, '{content}', to_jsonb(replace(item->>'content', $3, $4)))"
            " WHERE scope = $1 AND id = $2",
            self.scope, item_id, old, new,
        )  # fmt: skip

    async def add_corrupt(self, text: str) -> None:
        try:
            json.loads(text)
        except ValueError:
            await self._sql(
                "INSERT INTO memory_items (scope, file, line) VALUES ($1, 'semantic.jsonl', $2)", self.scope, text
            )
        else:
            await self._sql(
                "INSERT INTO memory_items (scope, file, item) VALUES ($1, 'semantic.jsonl', $2::jsonb)",
                self.scope,
                text,
            )

    async def raw_lines(self) -> list[str]:
        rows = await self._sql(
            "SELECT coalesce(item::text, line) AS text FROM memory_items"
            " WHERE scope = $1 AND file = 'semantic.jsonl' ORDER BY position",
            self.scope,
        )
        return [str(row["text"]) for row in rows]


@pytest.fixture(params=["files", "database"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "files":
        yield Files(tmp_path)
        return
    url: str = request.getfixturevalue("postgres_database")
    databases = OpenDatabases(url)
    rows = Rows(await databases.open(), url)
    try:
        yield rows
    finally:
        rows.items.close()
        await databases.close()


async def fresh(store: ItemStore) -> ItemStore:
    """The store with what changed elsewhere taken up, as `MemoryScopes.fresh` does before each use."""
    await store.refresh()
    store.refresh_sync()
    return store


async def test_items_written_are_there_for_the_next_process_and_searched_by_their_words(backend: Backend) -> None:
    store = await fresh(backend.open())
    store.append([item(S, "The dog is called Rex.", NOW, item_id="m1"), item(S, "Tea at five.", NOW, item_id="m2")])
    await store.flush()
    store.close()

    again = backend.open()
    index = Bm25Index()
    again.subscribe(index)
    await fresh(again)
    assert [each.id for each in again.items()] == ["m1", "m2"]
    assert list(index.search("rex", 5)) == ["m1"]
    again.close()


async def test_a_hand_edit_is_seen_on_the_next_refresh_and_searched_by_its_new_words(backend: Backend) -> None:
    await backend.seed([item(S, "The dog is called Rex.", NOW, item_id="m1")])
    store = backend.open()
    index = Bm25Index()
    store.subscribe(index)
    await fresh(store)
    assert list(index.search("rex", 5)) == ["m1"]

    await backend.edit_text("m1", "Rex", "Bolt")
    await fresh(store)
    edited = store.get("m1")
    assert edited is not None and edited.content == "The dog is called Bolt."
    assert index.search("rex", 5) == {} and list(index.search("bolt", 5)) == ["m1"]
    store.close()


async def test_search_keys_are_there_for_the_next_process_and_go_with_a_hand_edit_of_the_words(
    backend: Backend,
) -> None:
    store = await fresh(backend.open())
    store.append([item(S, "We had the pot pie again.", NOW, item_id="m1", search_keys=["poultry", "comfort food"])])
    await store.flush()
    store.close()

    again = backend.open()
    index = Bm25Index()
    again.subscribe(index)
    await fresh(again)
    assert list(index.search("poultry", 5)) == ["m1"]
    # The keys described the old words: the edited item is found by its new words alone.
    await backend.edit_text("m1", "the pot pie", "a quiche")
    await fresh(again)
    assert index.search("poultry", 5) == {} and list(index.search("quiche", 5)) == ["m1"]
    again.close()


async def test_a_corrupt_line_is_kept_left_out_of_memory_and_survives_a_rewrite(backend: Backend) -> None:
    await backend.seed([item(S, "good one", NOW, item_id="m1"), item(S, "good two", NOW, item_id="m2")])
    await backend.add_corrupt('{"id": "m9", "layer": "NOT A LAYER"}')
    await backend.add_corrupt("not json at all")
    store = await fresh(backend.open())
    assert [each.id for each in store.items()] == ["m1", "m2"]
    assert store.skipped_lines == 2

    first = store.get("m1")
    assert first is not None
    store.replace([first.model_copy(update={"content": "good one, changed"})])
    store.remove(["m2"])
    await store.flush()
    store.close()

    lines = await backend.raw_lines()
    assert len(lines) == 3 and "not json at all" in lines
    assert any("NOT A LAYER" in line for line in lines) and any("good one, changed" in line for line in lines)
    again = await fresh(backend.open())
    assert [each.content for each in again.items()] == ["good one, changed"]
    assert again.skipped_lines == 2
    again.close()


async def test_a_forgotten_item_is_gone_for_the_next_process_and_a_moved_one_is_in_its_new_layer(
    backend: Backend,
) -> None:
    await backend.seed([item(S, "keep me", NOW, item_id="m1"), item(S, "forget me", NOW, item_id="m2")])
    store = await fresh(backend.open())
    store.remove(["m2"])
    kept = store.get("m1")
    assert kept is not None
    store.relocate(kept.model_copy(update={"layer": MemoryLayer.PROCEDURAL}))
    await store.flush()
    store.close()

    again = await fresh(backend.open())
    assert [(each.id, each.layer) for each in again.items()] == [("m1", MemoryLayer.PROCEDURAL)]
    assert again.count_by_layer().get(S, 0) == 0
    again.close()


# -- what only a database does: processes sharing one scope ----------------------------------------------


async def test_two_processes_sharing_a_scope_see_each_others_writes_on_their_next_refresh(
    postgres_database: str,
) -> None:
    databases = OpenDatabases(postgres_database)
    first, second = ItemRowsInDatabase(await databases.open()), ItemRowsInDatabase(await databases.open())
    try:
        a, b = first.store("shared", UTC, None), second.store("shared", UTC, None)
        index_b = Bm25Index()
        b.subscribe(index_b)
        await fresh(a)
        await fresh(b)

        a.append([item(S, "The boat is moored at Kiel.", NOW, item_id="k1")])
        b.append([item(S, "Lunch is at noon.", NOW, item_id="k2")])  # the same file, at the same time
        await a.flush()
        await b.flush()
        await fresh(a)
        await fresh(b)
        assert {each.id for each in a.items()} == {each.id for each in b.items()} == {"k1", "k2"}
        assert list(index_b.search("kiel boat", 5)) == ["k1"]

        b.remove(["k1"])
        await b.flush()
        await fresh(a)
        assert [each.id for each in a.items()] == ["k2"]
        a.close()
        b.close()
    finally:
        first.close()
        second.close()
        await databases.close()


async def test_a_vector_stored_by_one_process_is_read_by_another_as_it_was_stored(
    postgres_database: str, tmp_path: Path
) -> None:
    databases = OpenDatabases(postgres_database)
    try:
        stored_by = ItemRowsInDatabase(await databases.open()).vectors
        read_by = ItemRowsInDatabase(await databases.open()).vectors
        rng = np.random.default_rng(7)
        made = {f"key{n}": rng.standard_normal(384).astype(np.float16) for n in range(5)}
        await stored_by.store("bundled", made)
        await stored_by.store("bundled", {"key0": np.zeros(384, dtype=np.float16)})  # made once: kept as first stored

        found = await read_by.load("bundled", {"key0", "key3", "missing"})
        assert found.keys() == {"key0", "key3"}
        assert np.array_equal(found["key0"], made["key0"]) and np.array_equal(found["key3"], made["key3"])
        # The same quantized rows as the cache in a workspace gives for the same vectors.
        on_disk = VectorCache(tmp_path)
        await on_disk.store("bundled", made)
        from_rows = await read_by.load_quantized("bundled", set(made))
        from_file = await on_disk.load_quantized("bundled", set(made))
        await on_disk.close()
        by_key_rows = {key: (row.tolist(), float(scale)) for b in from_rows for key, row, scale in zip(*b, strict=True)}
        by_key_file = {key: (row.tolist(), float(scale)) for b in from_file for key, row, scale in zip(*b, strict=True)}
        assert by_key_rows == by_key_file and len(by_key_rows) == 5
    finally:
        await databases.close()


# -- moving in and out: `bot migrate` and `bot export` -------------------------------------------------


def test_migrate_copies_the_item_files_with_every_line_and_export_writes_them_back_after_a_sql_edit(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    owner, chat = MemoryPaths(workspace / "memory"), MemoryPaths(workspace / "memory" / "chats" / "telegram:5")
    write_items(owner.semantic_file, [item(S, "The dog is called Rex.", NOW, item_id="m1")])
    with owner.semantic_file.open("a") as handle:  # hand edits: a key the bot does not know, and two bad lines
        handle.write(json.dumps({**item(S, "Tea at five.", NOW, item_id="m2").to_json_dict(), "mood": "calm"}) + "\n")
        handle.write('{"id": "m9", "layer": "NOT A LAYER"}\nnot json at all\n')
    write_items(
        owner.episodic_file(NOW.date()), [item(MemoryLayer.EPISODIC, "We talked about Rex.", NOW, item_id="e1")]
    )
    write_items(chat.procedural_file, [item(MemoryLayer.PROCEDURAL, "Deploy with make.", NOW, item_id="p1")])
    cache = VectorCache(owner.index_dir)
    asyncio.run(cache.store("bundled", {"k1": np.ones(8, dtype=np.float16)}))
    asyncio.run(cache.close())

    on_database = bot_env(workspace, fake_openai, BOT_DATABASE_URL=database_url)
    for _ in range(2):  # safe to run twice: the same rows, not twice as many
        result = run_main(["migrate"], on_database, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert (
            "4 memory items, 2 memory item lines that are not items (kept; see the log), 1 item vectors"
            in result.stdout
        )
        assert "Line 3 of" in result.stderr and "Line 4 of" in result.stderr

    async def edit_and_count() -> int:
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute(
                "UPDATE memory_items SET item = jsonb_set(item, '{content}', to_jsonb($1::text)) WHERE id = 'm1'",
                "The dog is called Bolt.",
            )
            return int(await connection.fetchval("SELECT count(*) FROM memory_items"))
        finally:
            await connection.close()

    assert asyncio.run(edit_and_count()) == 6

    exported = tmp_path / "exported"
    result = run_main(["export", str(exported)], on_database, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "3 memory item files" in result.stdout
    back = MemoryPaths(exported / "memory")
    lines = back.semantic_file.read_text().splitlines()
    assert [json.loads(line).get("content") for line in lines[:2]] == ["The dog is called Bolt.", "Tea at five."]
    assert json.loads(lines[1])["mood"] == "calm"
    assert lines[2:] == ['{"id":"m9","layer":"NOT A LAYER"}', "not json at all"]
    [episode] = read_items(back.episodic_file(NOW.date()))
    assert episode["content"] == "We talked about Rex."
    [procedure] = read_items(MemoryPaths(exported / "memory" / "chats" / "telegram:5").procedural_file)
    assert procedure["content"] == "Deploy with make."


async def test_the_vectors_one_process_made_are_read_by_another_and_not_made_again(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    fact = "My passport number ends in 4411."
    first = Application(env_for(tmp_path / "first", fake_openai, bot_database_url=database_url))
    second = Application(env_for(tmp_path / "second", fake_openai, bot_database_url=database_url))
    try:
        for each in (first, second):
            configure_memory(each, embeddingsModel="fake-embedding")
        await first.start()
        await second.start()
        await say(second, channel, "1", "/status")  # the second has read the stored vectors (none yet)
        await say(first, channel, "1", fact)  # the turn's item, and its vector made while idle
        assert any("4411" in text for text in embedded_texts(fake_openai))

        asked_before = len(fake_openai.requests)
        await say(second, channel, "1", "which passport?")  # the first's item reaches the second here
        status = await say(second, channel, "1", "/status")
        coverage = re.search(r"vectors (\d+)/(\d+) \(fake-embedding\)", status)
        assert coverage is not None and int(coverage[1]) == int(coverage[2]) >= 2, status
        assert not any("4411" in text for text in embedded_texts(fake_openai, asked_before))
    finally:
        await first.stop()
        await second.stop()


async def test_maintenance_reaches_a_scope_whose_items_are_only_in_the_database(
    postgres_database: str, tmp_path: Path
) -> None:
    databases = OpenDatabases(postgres_database)
    try:
        rows = Rows(await databases.open(), postgres_database)
        await rows.seed([item(S, "A fact of a chat with no folder here.", NOW, item_id="c1")])
        scopes = MemoryScopes(Workspace(tmp_path), UTC, None, items_in_database=rows.items)
        try:
            roots = [scope.paths.root for scope in await scopes.everywhere()]
            assert tmp_path / "memory" / rows.scope in roots
            assert tmp_path / "memory" in roots  # the owner's, as without a database
        finally:
            await scopes.close()
            rows.items.close()
    finally:
        await databases.close()


async def test_a_nul_character_in_an_item_does_not_stop_its_write_to_the_database(backend: Backend) -> None:
    store = await fresh(backend.open())
    store.append([item(S, "Before\x00after.", NOW, item_id="n1"), item(S, "A plain fact.", NOW, item_id="n2")])
    await store.flush()
    store.close()
    again = await fresh(backend.open())
    assert [each.id for each in again.items()] == ["n1", "n2"]
    written = again.get("n1")
    assert written is not None and written.content in ("Before\x00after.", "Before\ufffdafter.")
    again.close()


def test_the_copies_a_killed_process_left_are_removed_by_the_next_one_and_a_running_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    left = tmp_path / f"{COPIES_PREFIX}{ended.pid}-abc"
    (left / "copy" / "items").mkdir(parents=True)
    (left / "copy" / "items" / "semantic.jsonl").write_text("{}\n")
    running = tmp_path / f"{COPIES_PREFIX}{os.getppid()}-def"
    running.mkdir()
    unrelated = tmp_path / "bot-memory-items-notes"
    unrelated.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    items = ItemRowsInDatabase(Database("postgresql://unused@127.0.0.1/none"))
    items.store("chats/test:1", UTC, None)
    try:
        own = [path for path in tmp_path.iterdir() if path.name.startswith(f"{COPIES_PREFIX}{os.getpid()}-")]
        assert not left.exists() and running.is_dir() and unrelated.is_dir() and len(own) == 1
    finally:
        items.close()
    assert not own[0].exists()

"""`BOT_DATABASE_URL`: the runtime configuration is one row of the database, read as the file is, written by the
bot there, and followed by every process sharing the database.

Against the test process's own PostgreSQL (`tests/postgres_server.py`), each test on a database of its own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot import runtime_config_db
from bot.database.connection import Database
from bot.notices import OwnerNotices
from bot.runtime_config import DATABASE_SOURCE, WHOLE_FILE, RuntimeConfigStore, deep_merge
from bot.runtime_config_db import RuntimeConfigRow
from bot.shipped import shipped_path
from tests.channels.telegram_harness import OWNER, TEST_RUNTIME_CONFIG, start_bot
from tests.command_line import run_main
from tests.commands.test_conversation_commands import ask
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.test_cli import bot_env


@pytest.fixture(autouse=True)
def quick_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_config_db, "POLL_SECONDS", 0.05)


async def edit_row(url: str, text: str) -> None:
    """A hand edit of the row (psql, another process): the text and a new version."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            "INSERT INTO runtime_config (id, document) VALUES (true, $1)"
            " ON CONFLICT (id) DO UPDATE SET document = $1, version = runtime_config.version + 1",
            text,
        )
    finally:
        await connection.close()


async def followed(store: RuntimeConfigStore, text: str) -> None:
    """Until the store's process has read `text` from the database (its follower polls)."""
    async with asyncio.timeout(10):
        while store.written_text() != text:
            await asyncio.sleep(0.02)
    await store.current()


async def test_a_change_made_in_the_database_reaches_a_running_bots_next_message(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    try:
        fake_telegram.push_message(OWNER, "first")
        await fake_telegram.await_messages(OWNER)
        assert fake_openai.last_chat_request()["model"] != "model-from-the-database"

        text = json.dumps(deep_merge(TEST_RUNTIME_CONFIG, {"llm": {"model": "model-from-the-database"}}))
        await edit_row(database_url, text)
        await followed(bot.app.config_store, text)
        fake_telegram.push_message(OWNER, "second")
        await fake_telegram.await_messages(OWNER, count=2)
        assert fake_openai.last_chat_request()["model"] == "model-from-the-database"
    finally:
        await bot.stop()


async def test_a_bad_key_in_the_row_is_refused_alone_and_bad_json_keeps_the_last_good_configuration(
    database_url: str, tmp_path: Path
) -> None:
    database = Database(database_url)
    await database.start()
    notices = OwnerNotices(tmp_path / "owner-notices.json")
    store = RuntimeConfigStore(
        shipped_path("config") / "runtime-config.json", tmp_path / "runtime-config.json", notices=notices
    )
    row = RuntimeConfigRow(database)
    store.use_database(await row.read(), row.write)
    following = asyncio.create_task(row.follow(store))
    try:
        text = json.dumps({"llm": {"model": "kept-model"}, "memory": {"recentDay": 3}})
        await edit_row(database_url, text)
        await followed(store, text)
        assert store.in_force().llm.model == "kept-model"  # the row's other keys apply
        [problem] = store.problems()
        assert problem.key == "memory.recentDay" and "did you mean `memory.recentDays`" in problem.describe()
        assert notices.keys("runtime-config:") == {"runtime-config:memory.recentDay"}

        await edit_row(database_url, '{"llm": {"model": "half')
        await followed(store, '{"llm": {"model": "half')
        assert store.in_force().llm.model == "kept-model"
        assert [problem.key for problem in store.problems()] == [WHOLE_FILE]
        assert store.source() == DATABASE_SOURCE
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await database.close()


async def test_a_setting_written_by_one_process_reaches_another_sharing_the_database(
    database_url: str, tmp_path: Path
) -> None:
    databases = [Database(database_url), Database(database_url)]
    stores, tasks = [], []
    for number, database in enumerate(databases):
        await database.start()
        store = RuntimeConfigStore(shipped_path("config") / "runtime-config.json", tmp_path / f"{number}.json")
        row = RuntimeConfigRow(database)
        store.use_database(await row.read(), row.write)
        stores.append(store)
        tasks.append(asyncio.create_task(row.follow(store)))
    try:
        text = json.dumps({"memory": {"recentDays": 9}})
        written = await stores[0].write(text)  # what the console's settings form does
        assert written.memory.recent_days == 9
        await followed(stores[1], text)
        assert stores[1].in_force().memory.recent_days == 9
        assert not (tmp_path / "0.json").exists()  # the database holds it, not a file
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for database in databases:
            await database.close()


async def test_model_switches_every_process_sharing_the_database(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    config = {"llm": {"models": ["fast-model"]}}
    bot = await start_bot(workspace, fake_openai, fake_telegram, "ptb", config, bot_database_url=database_url)
    try:
        switched = await ask(fake_telegram, OWNER, "/model fast-model")
        assert switched == "Switched to fast-model; your next message uses it."
        await ask(fake_telegram, OWNER, "hello")
        assert fake_openai.last_chat_request()["model"] == "fast-model"
    finally:
        await bot.stop()
    assert not (workspace / "state" / "model.json").exists()

    # Another process on the same database: the switch is in the row, over what the file held.
    database = Database(database_url)
    await database.start()
    try:
        other = RuntimeConfigStore(shipped_path("config") / "runtime-config.json", tmp_path / "elsewhere.json")
        row = RuntimeConfigRow(database)
        other.use_database(await row.read(), row.write)
        in_force = other.load_now()
    finally:
        await database.close()
    assert in_force.llm.model == "fast-model" and in_force.llm.models == ["fast-model"]
    assert in_force.access.allowed_users == TEST_RUNTIME_CONFIG["access"]["allowedUsers"]


async def test_model_never_writes_over_a_row_with_a_slip_and_says_what_to_fix(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    config = {"llm": {"models": ["fast-model"]}}
    workspace = tmp_path / "workspace"
    bot = await start_bot(workspace, fake_openai, fake_telegram, "ptb", config, bot_database_url=database_url)
    try:
        hand_edit = json.dumps(deep_merge(TEST_RUNTIME_CONFIG, config)).removesuffix("}") + ",}"
        await edit_row(database_url, hand_edit)
        await followed(bot.app.config_store, hand_edit)
        [notice] = await fake_telegram.await_messages(OWNER)  # the owner is told of the slip first
        assert notice.text.startswith(f"I could not read {DATABASE_SOURCE}: invalid JSON")
        refused = await ask(fake_telegram, OWNER, "/model fast-model")
        assert refused.startswith(f"Nothing was switched: {DATABASE_SOURCE}: invalid JSON at line 1 column ")
        assert "a comma after the last entry" in refused and refused.endswith("Fix it first, then switch again.")
        assert bot.app.config_store.written_text() == hand_edit
    finally:
        await bot.stop()


async def test_model_is_refused_with_its_reason_where_bot_model_pins_the_model_of_a_shared_configuration(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    config = {"llm": {"models": ["fast-model"]}}
    bot = await start_bot(
        tmp_path / "workspace", fake_openai, fake_telegram, "ptb", config,
        bot_database_url=database_url, bot_model="pinned-model",
    )  # fmt: skip
    try:
        listed = await ask(fake_telegram, OWNER, "/model")
        assert listed.startswith("Model: pinned-model, set by BOT_MODEL in this bot's environment.")
        refused = await ask(fake_telegram, OWNER, "/model fast-model")
        assert refused.startswith("The model is set by BOT_MODEL (pinned-model)")
        assert "unset BOT_MODEL on every replica" in refused
        await ask(fake_telegram, OWNER, "hello")
        assert fake_openai.last_chat_request()["model"] == "pinned-model"
    finally:
        await bot.stop()
    row = await asyncpg.connect(database_url)
    try:
        written = await row.fetchval("SELECT document FROM runtime_config WHERE id")
    finally:
        await row.close()
    assert written is None or "fast-model" not in json.loads(written).get("llm", {}).get("model", "")


def test_migrate_copies_the_files_text_once_and_export_writes_it_back(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    config_file = workspace / "preferences" / "runtime-config.json"
    config_file.parent.mkdir(parents=True)
    text = '{\n  "llm": {"model": "migrated-model"}\n}\n'
    config_file.write_text(text)
    on_database = bot_env(workspace, fake_openai, BOT_DATABASE_URL=database_url)
    for _ in range(2):
        result = run_main(["migrate"], on_database, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "1 runtime configurations" in result.stdout

    async def rows() -> list[tuple[int, str]]:
        connection = await asyncpg.connect(database_url)
        try:
            return [(row["version"], row["document"]) for row in await connection.fetch("SELECT * FROM runtime_config")]
        finally:
            await connection.close()

    assert asyncio.run(rows()) == [(1, text)]  # the same text twice: written once

    exported = tmp_path / "exported"
    result = run_main(["export", str(exported)], on_database, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 runtime configurations" in result.stdout
    assert (exported / "preferences" / "runtime-config.json").read_text() == text

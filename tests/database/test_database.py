"""`BOT_DATABASE_URL`: the schema's migrations applied at start, once, and the bot's turns kept in PostgreSQL.

Against the test process's own PostgreSQL (`tests/postgres_server.py`), each test on a database of its own.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.access.pairing_db import PairingTables
from bot.database import connection as connection_module
from bot.database.connection import Database, DatabaseError
from bot.database.migrations import migrations
from bot.domain.session import AgentSession
from tests.channels.telegram_harness import OWNER, free_port, start_bot
from tests.command_line import run_main
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.test_cli import bot_env


async def applied(url: str) -> list[tuple[int, str]]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
    finally:
        await connection.close()
    return [(row["version"], row["name"]) for row in rows]


async def test_each_migration_is_applied_once_and_recorded_even_by_processes_starting_together(
    database_url: str,
) -> None:
    known = [(migration.version, migration.name) for migration in migrations()]
    assert known and known[0] == (1, "turn_ledger")
    together = [Database(database_url) for _ in range(4)]
    try:
        await asyncio.gather(*(database.start() for database in together))
    finally:
        for database in together:
            await database.close()
    assert await applied(database_url) == known
    again = Database(database_url)
    await again.start()  # nothing left to apply
    await again.close()
    assert await applied(database_url) == known


async def test_a_database_migrated_by_a_newer_bot_is_refused(database_url: str) -> None:
    first = Database(database_url)
    await first.start()
    await first.close()
    connection = await asyncpg.connect(database_url)
    await connection.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, 'from_the_future')")
    await connection.close()
    with pytest.raises(DatabaseError, match="migration 9999, newer than this bot's newest"):
        await Database(database_url).start()


def test_a_database_that_does_not_answer_stops_the_start_with_one_line_and_no_password(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    url = f"postgresql://bot:secret-password@127.0.0.1:{free_port()}/bot"
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_DATABASE_URL=url, BOT_LISTEN_PORT=str(free_port()))
    result = run_main(["run"], env, cwd=tmp_path)
    assert result.returncode == 2
    assert "Cannot start: PostgreSQL (BOT_DATABASE_URL)" in result.stderr
    assert "secret-password" not in result.stderr and "Traceback" not in result.stderr


def test_a_url_that_is_not_postgresql_is_refused_naming_the_variable(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_DATABASE_URL="mysql://bot:secret-password@db/bot")
    result = run_main(["status"], env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "Invalid environment: BOT_DATABASE_URL: it takes a PostgreSQL URL, "
        "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or unset)"
    )


async def test_a_message_through_telegram_is_kept_in_the_database_not_the_workspace(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    session_id = f"telegram:{OWNER}"
    bot = await start_bot(workspace, fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    try:
        update_id = fake_telegram.push_message(OWNER, "hello from the database")
        [reply] = await fake_telegram.await_messages(OWNER)
        assert reply.text == "echo: hello from the database"
    finally:
        await bot.stop()
    connection = await asyncpg.connect(database_url)
    try:
        turns = await connection.fetch("SELECT received->>'text' AS text, delivered_at FROM ledger_turns")
        seen = await connection.fetch("SELECT channel_type, key FROM ledger_seen")
        sessions = await connection.fetch("SELECT id FROM sessions")
        archived = await connection.fetchval("SELECT count(*) FROM session_archive WHERE session_id = $1", session_id)
    finally:
        await connection.close()
    assert [(turn["text"], turn["delivered_at"] is not None) for turn in turns] == [("hello from the database", True)]
    assert ("telegram", str(update_id)) in {(row["channel_type"], row["key"]) for row in seen}
    assert [row["id"] for row in sessions] == [session_id] and archived == 2  # the question and its answer
    assert not (workspace / "state" / "turns.jsonl").exists()
    assert list((workspace / "sessions").glob("*.json*")) == []
    assert not any((workspace / "sessions" / "archive").iterdir())


async def test_a_bot_on_another_machine_continues_the_conversation_from_the_database(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    first = await start_bot(tmp_path / "machine-a", fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    try:
        fake_telegram.push_message(OWNER, "my sister lives in Lisbon")
        await fake_telegram.await_messages(OWNER, 1)
    finally:
        await first.stop()
    # Another workspace (another machine's disk), the same database: the chat's history is there.
    second = await start_bot(tmp_path / "machine-b", fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    try:
        fake_telegram.push_message(OWNER, "where does my sister live?")
        replies = await fake_telegram.await_messages(OWNER, 2)
    finally:
        await second.stop()
    assert replies[-1].text == "echo: where does my sister live?"
    sent = [(m["role"], m["content"]) for m in fake_openai.last_chat_request()["messages"] if m["role"] != "system"]
    assert sent == [
        ("user", "my sister lives in Lisbon"),
        ("assistant", "echo: my sister lives in Lisbon"),
        ("user", "where does my sister live?"),
    ]


async def test_memory_md_edited_in_the_database_reaches_the_next_prompt_and_notes_are_kept_there(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    bot = await start_bot(workspace, fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    connection = await asyncpg.connect(database_url)
    try:
        fake_telegram.push_message(OWNER, "good morning")
        await fake_telegram.await_messages(OWNER, 1)
        await connection.execute(
            "INSERT INTO memory_documents (scope, name, content) VALUES ('.', 'MEMORY.md', $1)"
            " ON CONFLICT (scope, name) DO UPDATE SET content = excluded.content",
            "# Facts\n- The owner's sister Marta lives in Lisbon.\n",
        )
        fake_telegram.push_message(OWNER, "where does Marta live?")
        await fake_telegram.await_messages(OWNER, 2)
        system = "\n".join(m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "system")
    finally:
        await bot.stop()
    try:
        notes = await connection.fetch("SELECT name, content FROM memory_documents WHERE name <> 'MEMORY.md'")
    finally:
        await connection.close()
    assert "## Long-term Memory" in system and "Marta lives in Lisbon" in system
    [note] = notes
    assert note["content"].count("\n") == 2 and "User: good morning | Assistant: echo: good morning" in note["content"]
    assert not (workspace / "memory" / note["name"]).exists()


def test_memory_edit_writes_memory_md_where_the_bot_keeps_it(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_DATABASE_URL=database_url)
    result = run_main(["memory", "edit"], env, stdin="## About me\n- Lives in Porto.\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Saved MEMORY.md in the database" in result.stdout

    async def stored() -> str | None:
        connection = await asyncpg.connect(database_url)
        try:
            content = await connection.fetchval(
                "SELECT content FROM memory_documents WHERE scope = '.' AND name = 'MEMORY.md'"
            )
            return None if content is None else str(content)
        finally:
            await connection.close()

    assert asyncio.run(stored()) == "## About me\n- Lives in Porto.\n"
    assert "Porto" not in (tmp_path / "workspace" / "memory" / "MEMORY.md").read_text()  # the template's file


def test_pairing_from_the_command_line_reads_and_writes_the_database(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    async def a_stranger_asks() -> str:
        database = Database(database_url)
        await database.start()
        try:
            request = await PairingTables(database).request(77, "stranger", timedelta(hours=1), max_pending=5)
        finally:
            await database.close()
        assert request is not None
        return request.code

    code = asyncio.run(a_stranger_asks())
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_DATABASE_URL=database_url)
    listed = run_main(["pairing", "list"], env, cwd=tmp_path)
    assert listed.returncode == 0 and f"{code}  user 77 @stranger" in listed.stdout
    approved = run_main(["pairing", "approve", code.lower()], env, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert "Approved user 77 (@stranger)" in approved.stdout
    assert not (tmp_path / "workspace" / "access" / "pairing.json").exists()

    async def approved_ids() -> frozenset[int]:
        database = Database(database_url)
        await database.start()
        try:
            return await PairingTables(database).approved_ids()
        finally:
            await database.close()

    assert asyncio.run(approved_ids()) == frozenset({77})


async def test_healthz_says_whether_this_process_reaches_the_database(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(connection_module, "HEARTBEAT_SECONDS", 0.2)
    name = database_url.rsplit("/", 1)[-1]
    bot = await start_bot(
        tmp_path / "workspace", fake_openai, fake_telegram, "ptb", bot_database_url=database_url,
        bot_listen_port=free_port(),
    )  # fmt: skip
    admin = await asyncpg.connect(database_url.rsplit("/", 1)[0] + "/postgres")
    try:
        assert bot.listener is not None
        health = f"http://127.0.0.1:{bot.listener.port}/healthz"

        async def report() -> tuple[int, object]:
            async with aiohttp.ClientSession() as http, http.get(health) as response:
                return response.status, (await response.json())["database"]

        assert await report() == (200, True)
        # The server stops taking this database's connections and drops the ones the bot has.
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        await fake_telegram.await_until(lambda: not bot.app.stores.database.reachable)  # type: ignore[union-attr]
        assert await report() == (503, False)
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await fake_telegram.await_until(lambda: bot.app.stores.database.reachable)  # type: ignore[union-attr]
        assert await report() == (200, True)
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()
        await bot.stop()


def test_migrate_copies_a_workspace_into_the_database_and_is_safe_to_run_twice(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    on_files = bot_env(workspace, fake_openai)
    assert run_main(["chat"], on_files, stdin="my sister lives in Lisbon\n", cwd=tmp_path).returncode == 0
    (workspace / "memory" / "MEMORY.md").write_text("# Facts\n- Marta is the owner's sister.\n")

    on_database = bot_env(workspace, fake_openai, BOT_DATABASE_URL=database_url)
    first = run_main(["migrate"], on_database, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "1 sessions, 2 archived messages, 1 daily notes, 1 MEMORY.md files" in first.stdout
    again = run_main(["migrate"], on_database, cwd=tmp_path)
    assert again.returncode == 0 and "archived messages" not in again.stdout  # nothing copied twice

    # Another machine, an empty workspace, the same database: the conversation and the memory are there.
    elsewhere = bot_env(tmp_path / "elsewhere", fake_openai, BOT_DATABASE_URL=database_url)
    assert run_main(["chat"], elsewhere, stdin="where does she live?\n", cwd=tmp_path).returncode == 0
    messages = fake_openai.last_chat_request()["messages"]
    assert [m["content"] for m in messages if m["role"] != "system"] == [
        "my sister lives in Lisbon", "echo: my sister lives in Lisbon", "where does she live?"
    ]  # fmt: skip
    assert any("Marta is the owner's sister" in m["content"] for m in messages if m["role"] == "system")


def test_migrate_without_a_database_url_says_what_to_set(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    result = run_main(["migrate"], bot_env(tmp_path / "workspace", fake_openai), cwd=tmp_path)
    assert result.returncode == 2 and "BOT_DATABASE_URL is not set" in result.stderr


def test_export_writes_the_usual_files_and_an_edit_goes_back_with_migrate(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    on_database = bot_env(tmp_path / "workspace", fake_openai, BOT_DATABASE_URL=database_url)
    assert run_main(["chat"], on_database, stdin="remember the blue door\n", cwd=tmp_path).returncode == 0
    exported = tmp_path / "exported"
    result = run_main(["export", str(exported)], on_database, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 sessions, 1 archives, 1 memory documents" in result.stdout
    session = AgentSession.model_validate_json((exported / "sessions" / "console:local.json").read_text())
    assert [m.content for m in session.messages] == ["remember the blue door", "echo: remember the blue door"]
    archive = (exported / "sessions" / "archive" / "console:local.jsonl").read_text().splitlines()
    assert [json.loads(line)["content"] for line in archive] == [m.content for m in session.messages]
    [note] = list((exported / "memory").glob("*.md"))
    assert "User: remember the blue door | Assistant: echo: remember the blue door" in note.read_text()

    # The round trip people edit by: export, edit the file, migrate it back.
    (exported / "memory" / "MEMORY.md").write_text("- The door is blue.\n")
    back = bot_env(exported, fake_openai, BOT_DATABASE_URL=database_url)
    assert run_main(["migrate"], back, cwd=tmp_path).returncode == 0
    assert run_main(["chat"], on_database, stdin="which door?\n", cwd=tmp_path).returncode == 0
    system = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "system"]
    assert any("The door is blue." in text for text in system)

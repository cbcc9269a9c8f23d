"""Sessions behave the same in each of their storages: the workspace's files and PostgreSQL.

Each test runs on both (`storage`): what a restart reads back, `/new` keeping the archive, the messages
a long session's document lacks read back from the archive, a document spoiled by hand put aside, a
writer SIGKILLed mid-save, writes refused. PostgreSQL is the test process's own server.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.domain.message import Message
from bot.sessions.archive import lines_of
from bot.sessions.postgres import SessionTables
from bot.sessions.service import SessionPersistError, SessionService
from bot.sessions.storage import SessionFiles, SessionStorage
from tests.postgres_server import OpenDatabases

KILLS = 8
WRITER_READY_SECONDS = 60


@dataclass
class StorageCase:
    kind: str
    where: str  # the sessions folder, or the database's URL
    open: Callable[[], Awaitable[SessionStorage]]  # a new storage on the same place, as a restart makes it
    spoil: Callable[[str], Awaitable[None]]  # a hand edit that leaves the session's document unreadable
    put_aside: Callable[[str], Awaitable[list[str]]]  # the documents put aside for the session
    refuse_writes: Callable[[], Awaitable[None]]
    allow_writes: Callable[[], Awaitable[None]]


@pytest.fixture(params=["files", "postgres"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageCase]:
    if request.param == "files":
        folder = tmp_path / "sessions"

        async def files() -> SessionStorage:
            return SessionFiles(folder)

        async def spoil_file(session_id: str) -> None:
            (folder / f"{session_id}.json").write_text('{"id": "half a document')

        async def aside_files(session_id: str) -> list[str]:
            return sorted(path.read_text() for path in folder.glob(f"{session_id}.json.corrupt-*"))

        async def fill_disk() -> None:
            (folder / "archive").rename(folder / "archive-away")
            (folder / "archive").write_text("a file where the folder was: every append fails")

        async def free_disk() -> None:
            (folder / "archive").unlink()
            (folder / "archive-away").rename(folder / "archive")

        yield StorageCase("files", str(folder), files, spoil_file, aside_files, fill_disk, free_disk)
        return
    url: str = request.getfixturevalue("postgres_database")
    connection = await asyncpg.connect(url)
    databases = OpenDatabases(url)

    async def tables() -> SessionStorage:
        return SessionTables(await databases.open())

    async def spoil_row(session_id: str) -> None:
        await connection.execute('UPDATE sessions SET document = \'{"id": "half a document\' WHERE id = $1', session_id)

    async def aside_rows(session_id: str) -> list[str]:
        rows = await connection.fetch("SELECT document FROM sessions_quarantined WHERE session_id = $1", session_id)
        return sorted(row["document"] for row in rows)

    async def refuse() -> None:
        await connection.execute("ALTER TABLE session_archive ADD CONSTRAINT refused CHECK (false) NOT VALID")

    async def allow() -> None:
        await connection.execute("ALTER TABLE session_archive DROP CONSTRAINT refused")

    try:
        await tables()  # the schema, before the tables are emptied
        await connection.execute("ALTER TABLE session_archive DROP CONSTRAINT IF EXISTS refused")
        await connection.execute("TRUNCATE sessions, session_archive, sessions_quarantined")
        yield StorageCase("postgres", url, tables, spoil_row, aside_rows, refuse, allow)
    finally:
        await databases.close()
        await connection.close()


async def restarted(case: StorageCase) -> SessionService:
    return SessionService(await case.open())


async def test_a_restart_reads_back_the_sessions_and_new_keeps_the_archive(storage: StorageCase) -> None:
    sessions = await restarted(storage)
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("my sister lives in Lisbon"), Message.assistant("Noted.")])
    other = await sessions.get_or_create("telegram", "2")
    await sessions.append_messages(other, [Message.user("hello")])

    again = await restarted(storage)
    assert await again.stored_ids() == ["telegram:1", "telegram:2"]
    reloaded = await again.get_or_create("telegram", "1")
    assert [m.content for m in reloaded.messages] == ["my sister lives in Lisbon", "Noted."]
    assert await again.clear_messages(reloaded) == 2

    third = await restarted(storage)
    assert (await third.get_or_create("telegram", "1")).messages == []
    archived = await third.read_archive("telegram:1")
    assert [m.content for m in archived] == ["my sister lives in Lisbon", "Noted."]


async def test_messages_archived_after_the_document_are_read_back_once_each(storage: StorageCase) -> None:
    sessions = await restarted(storage)
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("in the document")])
    later = [Message.user("only archived"), Message.assistant("also only archived")]
    writer = await storage.open()
    await writer.write(session.id, lines_of(later), None, None)  # a save whose document was left behind
    await writer.write(session.id, lines_of(later[:1]), None, None)  # the same message twice: kept once

    reloaded = await (await restarted(storage)).get_or_create("telegram", "1")
    assert [m.content for m in reloaded.messages] == ["in the document", "only archived", "also only archived"]


async def test_a_document_spoiled_by_hand_is_put_aside_and_the_chat_starts_afresh(storage: StorageCase) -> None:
    sessions = await restarted(storage)
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("before the hand edit")])
    await storage.spoil("telegram:1")

    again = await restarted(storage)
    fresh = await again.get_or_create("telegram", "1")
    assert fresh.messages == [] and fresh.metadata.recovered_from is not None
    assert fresh.metadata.recovered_from.startswith(
        "telegram:1.json.corrupt-" if storage.kind == "files" else "telegram:1.corrupt-"
    )
    assert await storage.put_aside("telegram:1") == ['{"id": "half a document']  # nothing lost
    assert [m.content for m in await again.read_archive("telegram:1")] == ["before the hand edit"]
    await again.append_messages(fresh, [Message.user("after")])
    assert [m.content for m in (await (await restarted(storage)).get_or_create("telegram", "1")).messages] == ["after"]


async def test_a_save_refused_loses_nothing_and_goes_out_with_the_next_one(storage: StorageCase) -> None:
    sessions = await restarted(storage)
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("first")])
    await storage.refuse_writes()
    with pytest.raises(SessionPersistError):
        await sessions.append_messages(session, [Message.user("while refused")])
    await storage.allow_writes()
    await sessions.append_messages(session, [Message.user("after")])
    reloaded = await (await restarted(storage)).get_or_create("telegram", "1")
    assert [m.content for m in reloaded.messages] == ["first", "while refused", "after"]


async def test_a_writer_killed_mid_save_loses_no_acknowledged_message(storage: StorageCase) -> None:
    chance = random.Random(31)
    acknowledged: list[str] = []
    for _ in range(KILLS):
        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.sessions.crash_writer", storage.where, "long",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert writer.stdout is not None
        first = await asyncio.wait_for(writer.stdout.readline(), WRITER_READY_SECONDS)
        acknowledged.append(first.decode().split()[1])
        await asyncio.sleep(chance.uniform(0.0, 0.15))
        writer.kill()
        rest = (await writer.stdout.read()).decode()
        # A line the kill cut short (no newline yet) was never acknowledged.
        acknowledged += [line.split()[1] for line in rest.split("\n")[:-1]]
        await writer.wait()

        session = await (await restarted(storage)).get_or_create("telegram", "42")
        ids = [message.id for message in session.messages]
        assert len(ids) == len(set(ids))
        position = {message_id: index for index, message_id in enumerate(ids)}
        assert all(message_id in position for message_id in acknowledged)
        assert [position[message_id] for message_id in acknowledged] == sorted(position[m] for m in acknowledged)
    assert len(acknowledged) > KILLS

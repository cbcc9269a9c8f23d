"""The turn ledger behaves the same on each of its stores: the workspace's file and PostgreSQL.

Each test runs on both (`ledger_store`): what a restart finds open, the transport keys it recognises,
a hand-edited record that cannot be read, a process killed in the middle of a write, a store that
refuses writes. PostgreSQL is the test process's own server (`tests/postgres_server.py`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.domain.inbound import InboundMessage
from bot.ledger.postgres import LedgerTables
from bot.ledger.store import REMEMBERED_KEYS, LedgerFile, LedgerStore
from bot.ledger.turns import TurnLedger, TurnState
from tests.ledger.store_child import BATCH
from tests.postgres_server import OpenDatabases, PostgresServer, create_database

CHILD_READY_SECONDS = 60


def message(text: str, key: str | None = None, chat: str = "1") -> InboundMessage:
    return InboundMessage("telegram", chat, "7", text, dedup_key=key)


@dataclass
class StoreCase:
    """One store under test, and what the tests do to it from outside the bot."""

    kind: str
    where: str  # the file's path, or the database's URL
    store: Callable[[], Awaitable[LedgerStore]]  # a new store on the same place, opened
    # Replace the stored message of turn `turn_id` with something that is not a message (a bad hand edit).
    spoil: Callable[[str], Awaitable[None]]
    # Make every write fail (a full disk; a server that refuses writes).
    refuse_writes: Callable[[], Awaitable[None]]


@pytest.fixture(params=["files", "postgres"])
async def ledger_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreCase]:
    if request.param == "files":
        path = tmp_path / "state" / "turns.jsonl"

        async def spoil_line(turn_id: str) -> None:
            lines = [
                json.dumps({"received": {"journal_id": turn_id, "text": 42}}) if turn_id in line else line
                for line in path.read_text().splitlines()
            ]
            path.write_text("\n".join(lines) + "\n")

        async def fill_disk() -> None:
            path.unlink()
            path.mkdir()

        async def file() -> LedgerStore:
            return LedgerFile(path)

        yield StoreCase("files", str(path), file, spoil_line, fill_disk)
        return
    url: str = request.getfixturevalue("postgres_database")
    connection = await asyncpg.connect(url)
    databases = OpenDatabases(url)

    async def tables() -> LedgerStore:
        # A new store is a restarted process: the one before it is gone (its open turns are taken over).
        await databases.close()
        return LedgerTables(await databases.open())

    async def spoil_row(turn_id: str) -> None:
        await connection.execute(
            "UPDATE ledger_turns SET received = '{\"text\": 42}'::jsonb WHERE turn_id = $1", turn_id
        )

    async def refuse() -> None:
        await connection.execute("ALTER TABLE ledger_turns ADD CONSTRAINT refused CHECK (false) NOT VALID")
        await connection.execute("ALTER TABLE ledger_seen ADD CONSTRAINT refused CHECK (false) NOT VALID")

    try:
        await tables()  # the schema, before the tables are emptied
        for table in ("ledger_seen", "ledger_turns"):
            await connection.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS refused")
            await connection.execute(f"TRUNCATE {table}")
        yield StoreCase("postgres", url, tables, spoil_row, refuse)
    finally:
        await databases.close()


async def opened(case: StoreCase) -> TurnLedger:
    """A ledger on the store, loaded, as a start makes it."""
    ledger = TurnLedger(await case.store())
    await ledger.load()
    return ledger


async def test_a_restart_finds_the_open_turns_their_replies_and_edits_and_the_keys(ledger_store: StoreCase) -> None:
    ledger = await opened(ledger_store)
    first = await ledger.receive(message("first", "10"))
    second = await ledger.receive(message("second", "11"))
    third = await ledger.receive(message("third", "12"))
    await first.answered("echo: first")
    await first.delivered()
    await second.answered("echo: second")  # the stop comes before it is sent
    await third.edited("third, edited")  # and before this one was begun
    ledger.first_sight("telegram", "99")  # an update that made no turn
    await ledger.flush()
    await ledger.close()

    again = await opened(ledger_store)
    assert [(turn.inbound.text, turn.reply) for turn in again.open_turns()] == [
        ("second", "echo: second"),
        ("third, edited", None),
    ]
    assert [again.first_sight("telegram", key) for key in ("10", "11", "12", "99", "100")] == [
        False, False, False, False, True
    ]  # fmt: skip
    assert first.id is not None and again.state(first.id) is TurnState.DELIVERED


async def test_the_keys_remembered_are_the_newest(ledger_store: StoreCase) -> None:
    ledger = await opened(ledger_store)
    for number in range(REMEMBERED_KEYS + 10):
        ledger.first_sight("telegram", str(number))
    await ledger.flush()
    again = await opened(ledger_store)
    assert not again.first_sight("telegram", str(REMEMBERED_KEYS + 9))
    assert again.first_sight("telegram", "0")  # the oldest fell out of the window


async def test_a_record_spoiled_by_hand_is_skipped_and_the_others_are_answered(
    ledger_store: StoreCase, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = await opened(ledger_store)
    kept = await ledger.receive(message("kept", chat="1"))
    spoiled = await ledger.receive(message("spoiled", chat="2"))
    assert spoiled.id is not None
    await ledger.close()
    await ledger_store.spoil(spoiled.id)

    again = await opened(ledger_store)
    assert [turn.inbound.text for turn in again.open_turns()] == ["kept"]
    assert "[Ledger] Skipped an unreadable record" in caplog.text
    [turn] = again.open_turns()
    assert turn.turn_id == kept.id


async def test_a_process_killed_in_the_middle_of_a_write_leaves_whole_records_in_order(ledger_store: StoreCase) -> None:
    ledger = await opened(ledger_store)
    before = await ledger.receive(message("before the crash"))
    await ledger.close()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.ledger.store_child", ledger_store.kind, ledger_store.where,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        ready = await asyncio.wait_for(child.stdout.readline(), CHILD_READY_SECONDS)
        assert ready.strip() == b"ready"
        await asyncio.sleep(0.3)  # batches are being written
    finally:
        child.kill()
        await child.wait()

    again = await opened(ledger_store)
    texts = [turn.inbound.text for turn in again.open_turns()]
    assert texts[0] == "before the crash"
    written = texts[1:]
    assert len(written) >= BATCH  # the first append was done before the kill
    if ledger_store.kind == "postgres":
        assert len(written) % BATCH == 0  # one transaction an append
    # A file's append is one write, which a SIGKILL may cut between two pages: the torn last line is cut off,
    # and the batch's lines before it stay, each a record whole (none of them was acknowledged yet).
    assert written == [f"batch message {number}" for number in range(1, len(written) + 1)]
    after = await again.receive(message("after the crash"))
    assert after.recorded and before.id is not None
    assert [turn.inbound.text for turn in (await opened(ledger_store)).open_turns()][-1] == "after the crash"


async def test_a_store_that_refuses_writes_answers_the_turn_unrecorded(ledger_store: StoreCase) -> None:
    ledger = await opened(ledger_store)
    await ledger_store.refuse_writes()
    turn = await ledger.receive(message("hello"))
    assert not turn.recorded  # logged; the message is answered all the same
    await turn.answered("hi")
    await turn.delivered()
    ledger.first_sight("telegram", "5")
    await ledger.flush()  # logged, not raised: the transport keeps receiving


async def test_open_turns_of_a_live_process_stay_its_own_and_one_other_takes_them_once_it_is_gone(
    postgres_server: PostgresServer,
) -> None:
    async def no_session(_session_id: str) -> None:
        return None

    databases = OpenDatabases(await asyncio.to_thread(create_database, postgres_server, "ledger_owners"))
    try:
        owner_database = await databases.open()
        owner = TurnLedger(LedgerTables(owner_database))
        await owner.load()
        turn = await owner.receive(message("still being answered"))
        others = [TurnLedger(LedgerTables(await databases.open())) for _ in range(2)]
        for other in others:
            assert await other.load() == []  # its process is alive: not taken at a start either
        assert [await other.adopt(no_session, {"telegram"}) for other in others] == [[], []]
        await owner_database.close()  # the process is gone: its lock goes with its connection
        adopted = await asyncio.gather(*(other.adopt(no_session, {"telegram"}) for other in others))
        assert sorted(len(turns) for turns in adopted) == [0, 1]
        [taken] = [each for turns in adopted for each in turns]
        assert (taken.id, taken.inbound.text, taken.reopened) == (turn.id, "still being answered", True)
    finally:
        await databases.close()

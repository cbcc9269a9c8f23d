"""Pairing: one-time codes for strangers, approved from the command line; the same on each store
(`access/pairing.json`, and PostgreSQL's tables with `BOT_DATABASE_URL`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.access.pairing import CODE_ALPHABET, CODE_LENGTH, PairingError, PairingStorage, PairingStore
from bot.access.pairing_db import PairingTables
from bot.database.connection import Database

HOUR = timedelta(hours=1)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class PairingCase:
    kind: str
    folder: Path
    open: Callable[[Clock], PairingStorage]  # the bot's or the command line's view of the same state


@pytest.fixture(params=["files", "postgres"])
async def pairing(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PairingCase]:
    if request.param == "files":
        yield PairingCase("files", tmp_path, lambda clock: PairingStore(tmp_path / "access" / "pairing.json", clock))
        return
    database = Database(request.getfixturevalue("postgres_database"))
    await database.start()
    try:
        await database.fetch("DELETE FROM pairing_requests RETURNING code")
        await database.fetch("DELETE FROM pairing_approved RETURNING user_id")
        yield PairingCase("postgres", tmp_path, lambda clock: PairingTables(database, clock))
    finally:
        await database.close()


async def test_a_stranger_keeps_one_code_until_it_expires(pairing: PairingCase) -> None:
    clock = Clock()
    store = pairing.open(clock)
    first = await store.request(5, "ann", HOUR, max_pending=10)
    assert first is not None and len(first.code) == CODE_LENGTH and set(first.code) <= set(CODE_ALPHABET)
    assert await store.request(5, "ann", HOUR, max_pending=10) == first
    clock.now += HOUR
    renewed = await store.request(5, "ann", HOUR, max_pending=10)
    assert renewed is not None and renewed.code != first.code
    assert [request.user_id for request in await store.pending()] == [5]


async def test_approving_admits_the_user_once(pairing: PairingCase) -> None:
    clock = Clock()
    bot, command_line = pairing.open(clock), pairing.open(clock)
    request = await bot.request(5, "ann", HOUR, max_pending=10)
    assert request is not None
    assert await bot.approved_ids() == frozenset()
    user = await command_line.approve(f" {request.code.lower()} ")
    assert (user.user_id, user.username) == (5, "ann")
    assert await bot.approved_ids() == frozenset({5})  # the bot sees the command line's approval
    assert await bot.pending() == []
    with pytest.raises(PairingError, match="No pending pairing request"):
        await command_line.approve(request.code)
    if pairing.kind == "files":
        saved = json.loads((pairing.folder / "access" / "pairing.json").read_text())
        assert saved["pending"] == [] and saved["approved"][0]["userId"] == 5


async def test_an_expired_code_cannot_be_approved(pairing: PairingCase) -> None:
    clock = Clock()
    store = pairing.open(clock)
    request = await store.request(5, None, HOUR, max_pending=10)
    assert request is not None
    clock.now += 2 * HOUR
    with pytest.raises(PairingError, match="expired"):
        await store.approve(request.code)
    assert await store.approved_ids() == frozenset()
    with pytest.raises(PairingError, match="No pending pairing request"):
        await store.approve(request.code)  # the expired request is gone


async def test_waiting_strangers_are_bounded(pairing: PairingCase) -> None:
    store = pairing.open(Clock())
    assert await store.request(1, None, HOUR, max_pending=2) is not None
    assert await store.request(2, None, HOUR, max_pending=2) is not None
    assert await store.request(3, None, HOUR, max_pending=2) is None

"""`PairingStore`: one-time codes for strangers, approved from the command line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.access.pairing import CODE_ALPHABET, CODE_LENGTH, PairingError, PairingStore

HOUR = timedelta(hours=1)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_a_stranger_keeps_one_code_until_it_expires(tmp_path: Path) -> None:
    clock = Clock()
    store = PairingStore(tmp_path / "access" / "pairing.json", clock)
    first = await store.request(5, "ann", HOUR, max_pending=10)
    assert first is not None and len(first.code) == CODE_LENGTH and set(first.code) <= set(CODE_ALPHABET)
    assert await store.request(5, "ann", HOUR, max_pending=10) == first
    clock.now += HOUR
    renewed = await store.request(5, "ann", HOUR, max_pending=10)
    assert renewed is not None and renewed.code != first.code
    assert [request.user_id for request in store.pending()] == [5]


async def test_approving_admits_the_user_once(tmp_path: Path) -> None:
    store = PairingStore(tmp_path / "pairing.json")
    request = await store.request(5, "ann", HOUR, max_pending=10)
    assert request is not None
    assert await store.approved_ids() == frozenset()
    user = store.approve(f" {request.code.lower()} ")
    assert (user.user_id, user.username) == (5, "ann")
    assert await store.approved_ids() == frozenset({5})
    assert store.pending() == []
    with pytest.raises(PairingError, match="No pending pairing request"):
        store.approve(request.code)
    saved = json.loads((tmp_path / "pairing.json").read_text())
    assert saved["pending"] == [] and saved["approved"][0]["userId"] == 5


async def test_an_expired_code_cannot_be_approved(tmp_path: Path) -> None:
    clock = Clock()
    store = PairingStore(tmp_path / "pairing.json", clock)
    request = await store.request(5, None, HOUR, max_pending=10)
    assert request is not None
    clock.now += 2 * HOUR
    with pytest.raises(PairingError, match="expired"):
        store.approve(request.code)
    assert await store.approved_ids() == frozenset()


async def test_waiting_strangers_are_bounded(tmp_path: Path) -> None:
    store = PairingStore(tmp_path / "pairing.json")
    assert await store.request(1, None, HOUR, max_pending=2) is not None
    assert await store.request(2, None, HOUR, max_pending=2) is not None
    assert await store.request(3, None, HOUR, max_pending=2) is None

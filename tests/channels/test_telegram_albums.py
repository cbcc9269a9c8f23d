"""`Albums`: the photos of a group's album wait for the one that addresses the bot, within the album wait."""

from __future__ import annotations

from typing import Any

from bot.channels.telegram_albums import HELD_ALBUMS_KEPT, Albums

WAIT = 1.0


def photo(number: int) -> dict[str, Any]:
    return {"update_id": number, "message": {"message_id": number}}


def test_the_photos_held_before_the_addressed_one_are_handed_back_in_their_order() -> None:
    albums = Albums()
    albums.hold("g/1", photo(1), now=10.0, wait_seconds=WAIT)
    albums.hold("g/1", photo(2), now=10.1, wait_seconds=WAIT)
    albums.hold("g/2", photo(3), now=10.1, wait_seconds=WAIT)  # another album, not for the bot
    assert not albums.addressed("g/1")
    assert albums.address("g/1", now=10.2, wait_seconds=WAIT) == [photo(1), photo(2)]
    assert albums.addressed("g/1") and not albums.addressed("g/2")
    # Once handed back, they are not again.
    assert albums.address("g/1", now=10.3, wait_seconds=WAIT) == []


def test_photos_held_longer_than_the_wait_are_forgotten() -> None:
    albums = Albums()
    albums.hold("g/1", photo(1), now=10.0, wait_seconds=WAIT)
    albums.hold("g/2", photo(2), now=10.5, wait_seconds=WAIT)
    assert albums.address("g/1", now=11.2, wait_seconds=WAIT) == []
    assert albums.address("g/2", now=11.2, wait_seconds=WAIT) == [photo(2)]


def test_the_held_albums_are_bounded() -> None:
    albums = Albums()
    for number in range(HELD_ALBUMS_KEPT + 1):
        albums.hold(f"g/{number}", photo(number), now=10.0, wait_seconds=WAIT)
    assert albums.address("g/0", now=10.0, wait_seconds=WAIT) == []  # the oldest made room
    assert albums.address(f"g/{HELD_ALBUMS_KEPT}", now=10.0, wait_seconds=WAIT) == [photo(HELD_ALBUMS_KEPT)]


def test_each_photo_forgotten_is_told_so_that_the_ledger_lets_it_go() -> None:
    forgotten: list[dict[str, Any]] = []
    albums = Albums(forgotten.append)
    albums.hold("g/1", photo(1), now=10.0, wait_seconds=WAIT)
    albums.hold("g/2", photo(2), now=10.5, wait_seconds=WAIT)
    albums.forget_older(10.2)
    assert forgotten == [photo(1)]
    assert albums.address("g/2", now=10.6, wait_seconds=WAIT) == [photo(2)]  # handed back, not forgotten
    assert forgotten == [photo(1)]

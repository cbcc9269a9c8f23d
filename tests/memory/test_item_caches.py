"""The store's version and what it keeps in RAM: appends are followed (what was derived can be brought up
to date), any other change starts over."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.domain.memory import MemoryLayer
from bot.memory.item_caches import APPEND_LOG_SIZE, CORE_SALIENCE, ItemCaches
from tests.memory.helpers import item

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
E = MemoryLayer.EPISODIC


def test_appends_are_followed_until_another_change() -> None:
    caches = ItemCaches()
    start = caches.version
    caches.changed([item(E, "one", NOW, item_id="a1")], appended=True)
    caches.changed([item(E, "two", NOW, item_id="a2")], appended=True)
    assert caches.appended_since(start) == ["a1", "a2"]
    assert caches.appended_since(start + 1) == ["a2"]

    edited = caches.version
    caches.changed([item(E, "one, edited", NOW, item_id="a1")])  # a replace: not an append
    assert caches.appended_since(start) is None and caches.appended_since(edited) is None
    assert caches.appended_since(caches.version) == []


def test_the_append_log_is_bounded() -> None:
    caches = ItemCaches()
    start = caches.version
    for number in range(APPEND_LOG_SIZE + 1):
        caches.changed([item(E, f"line {number}", NOW, item_id=f"a{number}")], appended=True)
    assert caches.appended_since(start) is None


def test_the_chosen_lists_stay_until_a_change_that_may_touch_them() -> None:
    caches = ItemCaches()
    pinned = [item(E, "pinned", NOW, item_id="p1", pinned=True)]
    caches.keep_chosen("pinned", pinned)
    caches.changed([item(E, "plain", NOW, item_id="a1")], appended=True)
    assert caches.chosen("pinned") == pinned
    core = item(MemoryLayer.SEMANTIC, "a name", NOW, item_id="c1", salience=CORE_SALIENCE)
    caches.changed([core], appended=True)
    assert caches.chosen("pinned") is None

"""The store's version and what it keeps in RAM: appends are followed (what was derived can be brought up
to date), any other change starts over; the facts read stay across an append but for the items it touched."""

from __future__ import annotations

from datetime import UTC, date, datetime

from bot.domain.memory import MemoryLayer
from bot.memory.item_caches import APPEND_LOG_SIZE, CORE_SALIENCE, ItemCaches
from bot.memory.item_storage import ItemFacts
from tests.memory.helpers import item

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
E = MemoryLayer.EPISODIC


def facts(item_id: str) -> ItemFacts:
    return ItemFacts(item_id, E, True, date(2026, 3, 1), None, 0.0, 0.5, 0.8)


def test_appends_are_followed_until_another_change() -> None:
    caches = ItemCaches()
    start = caches.version
    caches.changed([item(E, "one", NOW, item_id="a1")], appended=True, touched=["a1"])
    caches.changed([item(E, "two", NOW, item_id="a2")], appended=True, touched=["a2"])
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
        caches.changed([item(E, f"line {number}", NOW, item_id=f"a{number}")], appended=True, touched=[])
    assert caches.appended_since(start) is None


def test_facts_stay_across_an_append_but_for_the_touched_items() -> None:
    caches = ItemCaches()
    caches.fresh_facts()
    caches.facts.update({"a1": facts("a1"), "a2": facts("a2")})
    caches.changed([item(E, "three", NOW, item_id="a3")], appended=True, touched=["a3", "a2"])
    caches.fresh_facts()
    assert set(caches.facts) == {"a1"}  # a2's next neighbour is now a3: read again

    caches.changed([item(E, "one, edited", NOW, item_id="a1")])
    caches.fresh_facts()
    assert caches.facts == {}


def test_the_chosen_lists_stay_until_a_change_that_may_touch_them() -> None:
    caches = ItemCaches()
    pinned = [item(E, "pinned", NOW, item_id="p1", pinned=True)]
    caches.keep_chosen("pinned", pinned)
    caches.changed([item(E, "plain", NOW, item_id="a1")], appended=True, touched=[])
    assert caches.chosen("pinned") == pinned
    core = item(MemoryLayer.SEMANTIC, "a name", NOW, item_id="c1", salience=CORE_SALIENCE)
    caches.changed([core], appended=True, touched=[])
    assert caches.chosen("pinned") is None

"""The lexical index scores as one built anew from the same items, whatever changes came between searches
(it keeps each document's length normalisation from one search to the next)."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.lexical_index import Bm25Index
from tests.memory.helpers import item

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TEXTS = (
    "we watered the garden tomatoes",
    "the tomatoes in the garden need more sun than the basil by the kitchen window",
    "Ann booked the train to the museum",
    "garden",
    "the long story of the garden, the tomatoes, the basil, the shed, the fence and the neighbours' cat",
)


def built_anew(items: list[MemoryItem]) -> Bm25Index:
    index = Bm25Index()
    index.add_many(items)
    return index


def test_a_search_after_each_change_scores_as_an_index_built_anew() -> None:
    items = [item(MemoryLayer.SEMANTIC, text, NOW, item_id=f"i{n}") for n, text in enumerate(TEXTS)]
    index = built_anew(items[:3])
    query = "garden tomatoes"
    assert index.search(query, 10) == built_anew(items[:3]).search(query, 10)

    # A short and a long document change the average length every document is normalised by.
    index.add(items[3])
    assert index.search(query, 10) == built_anew(items[:4]).search(query, 10)
    index.add_many([items[4]])
    assert index.search(query, 10) == built_anew(items).search(query, 10)
    index.remove("i1")
    assert index.search(query, 10) == built_anew([items[0], *items[2:]]).search(query, 10)
    # Edited to another text: removed and added again.
    edited = items[0].model_copy(update={"content": "the garden tomatoes, watered twice and staked"})
    index.add(edited)
    assert index.search(query, 10) == built_anew([edited, *items[2:]]).search(query, 10)

    index.clear()
    index.add_many(items[3:])
    assert index.search(query, 10) == built_anew(items[3:]).search(query, 10)

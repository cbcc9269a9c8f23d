"""Lexical index, scoring and the prompt pack's budgets, in isolation."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryItem, MemoryLayer, MemoryQuery
from bot.memory.item_storage import ItemFacts
from bot.memory.lexical_index import Bm25Index, tokenize
from bot.memory.prompt_pack import (
    FULL_AFTER_MISSES,
    ITEM_CHAR_LIMIT,
    PARSE_AHEAD,
    MemoryPromptPackService,
    offered_order,
)
from bot.memory.retrieval import (
    RECENCY_HALF_LIFE_DAYS,
    SECTION_OF_LAYER,
    W_CONFIDENCE,
    W_RECENCY,
    W_RELEVANCE,
    W_SALIENCE,
    RankedItem,
    Section,
    dense_query_text,
    names_in,
    ranked_by_score,
)
from tests.memory.helpers import item

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = MemoryLayer.SEMANTIC


def test_tokenize_drops_stopwords_and_folds_simple_suffixes() -> None:
    assert tokenize("The dogs were barking at the cats!") == ["dog", "bark", "cat"]


def test_bm25_ranks_rarer_and_denser_matches_higher_and_follows_removals() -> None:
    index = Bm25Index()
    index.add(item(S, "deploy the service with docker compose", NOW, item_id="a"))
    index.add(item(S, "docker docker docker images are large", NOW, item_id="b"))
    index.add(item(S, "the kubernetes cluster runs the service", NOW, item_id="c"))
    scores = index.search("docker compose", 10)
    assert list(sorted(scores, key=scores.__getitem__, reverse=True)) == ["a", "b"]
    index.remove("a")
    assert list(index.search("docker compose", 10)) == ["b"]
    index.add(item(S, "superseded docker note", NOW, item_id="d", superseded_by="b"))
    assert "d" not in index.search("docker", 10)


def test_items_indexed_one_by_one_score_as_items_indexed_in_one_batch() -> None:
    # A turn's item takes the posting-by-posting path, a start-up load the grouped one: same scores.
    words = ["docker", "compose", "service", "cluster", "images", "deploy", "garden", "tomatoes"]
    items = [
        item(
            S,
            " ".join(words[(i * 3 + j) % len(words)] for j in range(1 + i % 5)) + " docker" * (i % 3),
            NOW,
            item_id=f"i{i}",
        )
        for i in range(120)
    ]
    one_by_one, batched = Bm25Index(), Bm25Index()
    for each in items:
        one_by_one.add(each)
    batched.add_many(items)
    for index in (one_by_one, batched):
        index.remove("i7")
        index.add(item(S, "docker garden tomatoes tomatoes", NOW, item_id="i8"))  # replaces i8
    for query in ("docker", "garden tomatoes", "compose service cluster", "images deploy docker"):
        assert one_by_one.search(query, 200) == pytest.approx(batched.search(query, 200))
        assert one_by_one.search(query, 200)


SEARCH_IN_A_NEW_PROCESS = """
import random
from datetime import UTC, datetime
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.lexical_index import Bm25Index
rng = random.Random(5)
words = [f"word{n}" for n in range(300)]
now = datetime(2026, 1, 1, tzinfo=UTC)
index = Bm25Index()
index.add_many([
    MemoryItem(id=f"i{n}", layer=MemoryLayer.SEMANTIC, type="fact", created_at=now, updated_at=now,
               content=" ".join(rng.choices(words, k=rng.randint(5, 40))), confidence=0.8, salience=0.5, source="test")
    for n in range(2000)
])
print(sorted(index.search(" ".join(rng.choices(words, k=12)), 50).items()))
"""


def test_a_search_gives_the_same_scores_in_every_process() -> None:
    # Each process hashes strings with its own seed, which orders a set of query terms: the scores must not follow.
    answers = {
        subprocess.run(
            [sys.executable, "-c", SEARCH_IN_A_NEW_PROCESS],
            env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True, check=True,
        ).stdout
        for seed in (1, 2, 3)
    }  # fmt: skip
    assert len(answers) == 1 and "i" in answers.pop()


class Stored:
    """Items by id, as the store reads them for the pack (counting what it was asked to parse)."""

    def __init__(self) -> None:
        self.items: dict[str, MemoryItem] = {}
        self.read: list[str] = []

    def ranked(self, content: str, relevance: float, section: str = Section.SEMANTIC, **extra: Any) -> RankedItem:
        stored = item(S, content, NOW, **extra)
        self.items[stored.id] = stored
        return RankedItem(
            stored.id, stored.layer, relevance, section, relevance, 1.0, 0.5, 0.8, stored.updated_at.timestamp()
        )

    def get_many(self, item_ids: Iterable[str]) -> dict[str, MemoryItem]:
        wanted = list(item_ids)
        self.read += wanted
        return {item_id: self.items[item_id] for item_id in wanted if item_id in self.items}


def test_the_pack_fills_the_soft_budget_then_asks_more_relevance_the_further_past_it_an_item_goes() -> None:
    pack_service = MemoryPromptPackService(TokenEstimator(), UTC)
    stored = Stored()
    items = [
        stored.ranked("low score but first in the file", 0.2),
        stored.ranked("a high scoring fact about the garden", 0.9),
        stored.ranked("a fact less than half as relevant as the best, about the garage", 0.4),
        stored.ranked("another high scoring fact about the kitchen", 0.8),
        stored.ranked("a fact about the attic", 0.97),
        stored.ranked("always shown because it is pinned", 0.1, Section.PINNED, pinned=True),
    ]
    offered = offered_order(items, MemoryQuery(text="", session_id="test:1", now=NOW, semantic_top_k=0))
    pack = pack_service.build(offered, stored.get_many, candidates=6, soft_tokens=25, max_tokens=70)
    # Pinned (17 tokens with its header), then past the soft budget: the attic (16 with its header, to 33
    # tokens: 27 % of the way from the soft budget to the max, so it needs 0.60), the garden (to 45: 67 %,
    # needs 0.82); the kitchen would fill 59 of the 70 (76 %, needs 0.87) and is left out at 0.8.
    assert pack.rendered == (
        "## Pinned Memory\n- always shown because it is pinned\n\n"
        "## Facts and Preferences\n"
        "- a fact about the attic\n"
        "- a high scoring fact about the garden"
    )
    assert pack.diagnostics.selected == 3 and pack.diagnostics.dropped_for_budget == 3
    assert pack.diagnostics.tokens <= 70


def test_the_pack_names_the_candidates_it_left_out_for_the_budget() -> None:
    stored = Stored()
    items = [
        stored.ranked("a high scoring fact about the garden", 0.9),
        stored.ranked("a fact less than half as relevant as the best, about the garage", 0.4),
        stored.ranked("low score and long enough to be left out of the pack", 0.2),
    ]
    offered = offered_order(items, MemoryQuery(text="", session_id="test:1", now=NOW, semantic_top_k=0))
    pack = MemoryPromptPackService(TokenEstimator(), UTC).build(offered, stored.get_many, 3, 20, 20)
    assert [scored.item.id for scored in pack.items] == [items[0].item_id]
    assert pack.diagnostics.missed == (
        (items[1].item_id, 0.4, Section.SEMANTIC),
        (items[2].item_id, 0.2, Section.SEMANTIC),
    )


def test_the_pack_parses_only_the_items_it_reads_and_passes_over_one_no_longer_stored() -> None:
    stored = Stored()
    gone = stored.ranked("a fact forgotten since it was scored", 0.95)
    del stored.items[gone.item_id]
    offered = [gone] + [stored.ranked(f"fact number {n} about the garden shed", 0.4 - n / 1000) for n in range(300)]
    pack = MemoryPromptPackService(TokenEstimator(), UTC).build(offered, stored.get_many, 301, 60, 120)
    assert "forgotten" not in pack.rendered and pack.rendered.startswith("## Facts and Preferences\n- fact number 0 ")
    # The soft budget holds a few items; none later is relevant enough to go past it, so the rest is never parsed.
    assert pack.diagnostics.selected < 10 and len(stored.read) < 50
    assert pack.diagnostics.dropped_for_budget == 300 - pack.diagnostics.selected


def test_an_item_edited_between_two_packs_shows_its_new_text_and_day() -> None:
    """What a pack shows of an item is kept for the next packs: by its text and time, so an edit is shown."""
    pack_service = MemoryPromptPackService(TokenEstimator(), UTC)
    stored = Stored()
    entry = stored.ranked("we water the tomatoes every evening", 0.9, Section.EPISODIC)

    def shown_after(**edit: Any) -> str:
        stored.items[entry.item_id] = stored.items[entry.item_id].model_copy(update=edit)
        return pack_service.build([entry], stored.get_many, 1, 200, 400).rendered

    assert "### 2026-03-01 (Sunday)\n- 12:00 we water the tomatoes every evening" in shown_after()
    assert "### 2026-03-01 (Sunday)\n- 12:00 we water the tomatoes every morning" in shown_after(
        content="we water the tomatoes every morning"
    )
    assert "### 2026-02-26 (Thursday)\n- 12:00 we water the tomatoes every morning" in shown_after(
        created_at=NOW - timedelta(days=3)
    )


def test_a_full_pack_stops_reading_after_highly_relevant_items_in_a_row_no_longer_fit() -> None:
    stored = Stored()
    long_fact = "a highly relevant fact about the garden shed and the tools kept in it, number {}"
    offered = [stored.ranked(long_fact.format(n), 0.9 - n / 1000) for n in range(5)]
    offered.append(stored.ranked("short one", 0.99))  # fits the room the long ones left: a miss does not end it
    offered += [stored.ranked(long_fact.format(n), 0.8 - n / 1000) for n in range(5, 300)]
    pack = MemoryPromptPackService(TokenEstimator(), UTC).build(offered, stored.get_many, 300, 40, 64)
    assert "- short one" in pack.rendered
    assert pack.diagnostics.selected + pack.diagnostics.dropped_for_budget == len(offered)
    # Every item is highly relevant, but past FULL_AFTER_MISSES misses in a row the rest is never parsed.
    assert pack.diagnostics.selected < 10 and len(stored.read) <= 10 + FULL_AFTER_MISSES + PARSE_AHEAD < len(offered)


def test_a_long_item_is_cut_with_a_visible_marker() -> None:
    stored = Stored()
    offered = [stored.ranked("x" * 2000, 0.9)]
    pack = MemoryPromptPackService(TokenEstimator(), UTC).build(offered, stored.get_many, 1, 1800, 3500)
    assert pack.rendered.startswith("## Facts and Preferences\n- " + "x" * ITEM_CHAR_LIMIT + " [… 1300 more characters")


def test_recency_favours_newer_items_with_equal_relevance() -> None:
    def facts(item_id: str, days_old: int) -> ItemFacts:
        updated = (NOW - timedelta(days=days_old)).timestamp()
        return ItemFacts(item_id, MemoryLayer.EPISODIC, True, NOW.date(), None, updated, 0.5, 0.8)

    fresh, old = ranked_by_score([(facts("fresh", 1), 0.6), (facts("old", 30), 0.6)], NOW.timestamp())
    assert fresh.recency > 0.95 and 0.45 < old.recency < 0.55  # halves every 30 days
    assert fresh.score > old.score


def test_scores_are_the_formula_of_each_candidate_rounded_to_four_places() -> None:
    """The scores are made a column at a time: each must be what the formula gives for its candidate alone,
    `round(score, 4)` included, near a half of the fourth place too (where a product's rounding could cross it)."""
    rng = random.Random(11)
    now = NOW.timestamp()
    decay = math.log(2) / RECENCY_HALF_LIFE_DAYS
    layers = list(SECTION_OF_LAYER)
    scored = []
    for number in range(3000):
        updated = now if number % 50 == 0 else now - rng.uniform(-3600, 400 * 86400)  # some from the future
        facts = ItemFacts(
            f"i{number}", rng.choice(layers), True, NOW.date(), None, updated, rng.random(), round(rng.random(), 2)
        )
        scored.append((facts, rng.choice([0.0, 1.0, rng.random(), rng.random() * 1.4])))
    # Relevances that put the score within a few units in the last place of a half of the fourth place.
    for number in range(300):
        facts = ItemFacts(f"h{number}", MemoryLayer.SEMANTIC, True, NOW.date(), None, now, 0.0, 0.0)
        half = (rng.randrange(1, 9000) + 0.5) / 1e4
        relevance = (half - W_RECENCY) / W_RELEVANCE
        for _ in range(rng.randrange(4)):
            relevance = math.nextafter(relevance, rng.choice([0.0, 2.0]))
        scored.append((facts, relevance))

    ranked = ranked_by_score(scored, now)

    for (facts, relevance), entry in zip(scored, ranked, strict=True):
        fresh = math.exp(-(max(now - facts.updated, 0.0) / 86400) * decay)
        score = (
            W_RELEVANCE * relevance + W_RECENCY * fresh + W_SALIENCE * facts.salience + W_CONFIDENCE * facts.confidence
        )
        section = SECTION_OF_LAYER[facts.layer]
        expected = (facts.id, facts.layer, round(score, 4), section, relevance, fresh, *facts[6:], facts.updated)
        assert tuple(entry) == expected and type(entry) is RankedItem
    assert [entry.section for entry in ranked_by_score(scored[:3], now, Section.PINNED)] == [Section.PINNED] * 3
    assert ranked_by_score([], now) == []


def test_equal_scores_are_offered_in_the_order_of_their_ids() -> None:
    def ranked(item_id: str, score: float) -> RankedItem:
        return RankedItem(item_id, S, score, Section.SEMANTIC, 0.5, 1.0, 0.5, 0.5, 0.0)

    items = [ranked("c", 0.5), ranked("a", 0.7), ranked("b", 0.5), ranked("d", 0.9), ranked("a2", 0.5)]
    offered = offered_order(items, MemoryQuery(text="", session_id="test:1", now=NOW, semantic_top_k=2))
    assert [entry.item_id for entry in offered] == ["d", "a", "a2", "b", "c"]


def test_the_dense_query_drops_speakers_names_with_their_possessive_and_keeps_other_names() -> None:
    text = "What is Dave's main passion, and did Calvin meet Toby?"
    assert names_in(text) == {"What", "Dave", "Calvin", "Toby"}
    assert dense_query_text(text, {"Dave", "Calvin"}) == "What is main passion, and did meet Toby?"
    assert dense_query_text(text, set()) == text
    # A message that is only a speaker's name keeps it: an empty vector query would match nothing.
    assert dense_query_text("Dave?", {"Dave"}) == "Dave?"

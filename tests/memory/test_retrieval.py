"""Lexical index, scoring and the prompt pack's budgets, in isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryLayer, MemoryQuery, ScoredItem
from bot.memory.lexical_index import Bm25Index, tokenize
from bot.memory.prompt_pack import ITEM_CHAR_LIMIT, MemoryPromptPackService, offered_order
from bot.memory.retrieval import Section, dense_query_text, names_in
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


def scored(content: str, relevance: float, section: str = Section.SEMANTIC, **extra: Any) -> ScoredItem:
    """An item scored by its relevance alone (the other parts of the score are left out)."""
    return ScoredItem(item(S, content, NOW, **extra), relevance, section, {"relevance": relevance})


def test_the_pack_fills_the_soft_budget_then_only_highly_relevant_items_up_to_the_max() -> None:
    pack_service = MemoryPromptPackService(TokenEstimator(), UTC)
    items = [
        scored("low score but first in the file", 0.2),
        scored("a high scoring fact about the garden", 0.9),
        scored("a fact less than half as relevant as the best, about the garage", 0.4),
        scored("another high scoring fact about the kitchen", 0.8),
        scored("always shown because it is pinned", 0.1, Section.PINNED, pinned=True),
    ]
    offered = offered_order(items, MemoryQuery(text="", session_id="test:1", now=NOW, semantic_top_k=0))
    pack = pack_service.build(offered, candidates=5, soft_tokens=25, max_tokens=55)
    assert pack.rendered == (
        "## Pinned Memory\n- always shown because it is pinned\n\n"
        "## Facts and Preferences\n"
        "- a high scoring fact about the garden\n"
        "- another high scoring fact about the kitchen"
    )
    assert pack.diagnostics.selected == 3 and pack.diagnostics.dropped_for_budget == 2
    assert pack.diagnostics.tokens <= 55


def test_a_long_item_is_cut_with_a_visible_marker() -> None:
    pack = MemoryPromptPackService(TokenEstimator(), UTC).build([scored("x" * 2000, 0.9)], 1, 1800, 3500)
    assert pack.rendered.startswith("## Facts and Preferences\n- " + "x" * ITEM_CHAR_LIMIT + " [… 1300 more characters")


def test_recency_favours_newer_items_with_equal_relevance() -> None:
    from bot.memory.retrieval import recency

    query = MemoryQuery(text="", session_id="test:1", now=NOW)
    fresh = item(S, "a", NOW - timedelta(days=1))
    old = item(S, "b", NOW - timedelta(days=30))
    assert recency(fresh, query) > 0.95 and 0.45 < recency(old, query) < 0.55  # halves every 30 days


def test_the_dense_query_drops_speakers_names_with_their_possessive_and_keeps_other_names() -> None:
    text = "What is Dave's main passion, and did Calvin meet Toby?"
    assert names_in(text) == {"What", "Dave", "Calvin", "Toby"}
    assert dense_query_text(text, {"Dave", "Calvin"}) == "What is main passion, and did meet Toby?"
    assert dense_query_text(text, set()) == text
    # A message that is only a speaker's name keeps it: an empty vector query would match nothing.
    assert dense_query_text("Dave?", {"Dave"}) == "Dave?"

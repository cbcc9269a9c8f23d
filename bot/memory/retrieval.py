"""`MemoryRetrievalService`: which items are worth the prompt for this message, scored 0..1.

Candidates are the lexical (BM25) matches of the message, its nearest neighbours by embedding when
an embedder is configured, the high-salience facts, the pinned items and the most recent turns.
Each is scored

    score = W_RELEVANCE·relevance + W_RECENCY·recency + W_SALIENCE·salience + W_CONFIDENCE·confidence

where relevance is the BM25 score normalised by the best one (blended with cosine similarity when
vectors are in use) and recency halves every `RECENCY_HALF_LIFE_DAYS`. Each layer keeps its top k:
`workingTopK` recent turns, `episodicTopK`, `semanticTopK`, `proceduralTopK`; pinned items always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bot.domain.memory import MemoryItem, MemoryLayer, MemoryQuery, ScoredItem
from bot.memory.embeddings import Vector, VectorIndex
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index

W_RELEVANCE = 0.55
W_RECENCY = 0.15
W_SALIENCE = 0.15
W_CONFIDENCE = 0.15
# Within relevance, when embeddings are in use: how much is lexical and how much is vector similarity.
LEXICAL_SHARE = 0.5
RECENCY_HALF_LIFE_DAYS = 14.0
_DECAY_PER_DAY = math.log(2) / RECENCY_HALF_LIFE_DAYS
LEXICAL_CANDIDATES = 64
VECTOR_CANDIDATES = 64
# A vector neighbour without any shared word must be at least this similar to count.
MIN_VECTOR_SIMILARITY = 0.35
# The most salient SEMANTIC items (names, constraints: `CORE_SALIENCE`) compete for the prompt even
# without a shared word; this many per semantic top-k slot.
CORE_CANDIDATES_PER_TOP_K = 2


class Section:
    """Where an item shows in the pack; also the order of the pack's sections."""

    PINNED = "pinned"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    EPISODIC = "episodic"
    WORKING = "working"

    ORDER = (PINNED, SEMANTIC, PROCEDURAL, EPISODIC, WORKING)


@dataclass(frozen=True)
class RetrievalResult:
    items: list[ScoredItem]
    candidates: int
    used_vectors: bool


def recency(item: MemoryItem, query: MemoryQuery) -> float:
    """1 for an item updated now, halving every `RECENCY_HALF_LIFE_DAYS`."""
    age_days = max((query.now - item.updated_at).total_seconds(), 0.0) / 86400
    return math.exp(-age_days * _DECAY_PER_DAY)


class MemoryRetrievalService:
    """Scores and selects one scope's items for a query."""

    def __init__(self, store: MemoryItemStore, lexical: Bm25Index, vectors: VectorIndex) -> None:
        self._store = store
        self._lexical = lexical
        self._vectors = vectors

    def search(self, text: str, limit: int, query_vector: Vector | None = None) -> list[tuple[MemoryItem, float]]:
        """Items matching `text` by relevance alone (for `memory_search` and `/memory`)."""
        relevance = self._relevance(text, query_vector)
        ranked = sorted(relevance.items(), key=lambda pair: pair[1], reverse=True)
        found = []
        for item_id, score in ranked:
            item = self._store.get(item_id)
            if item is not None and item.active:
                found.append((item, score))
            if len(found) >= limit:
                break
        return found

    def retrieve(self, query: MemoryQuery, query_vector: Vector | None = None) -> RetrievalResult:
        pinned = self._store.pinned()
        chosen: list[ScoredItem] = [self._scored(item, query, 1.0, Section.PINNED) for item in pinned]
        taken = {item.id for item in pinned}

        def in_conversation(item: MemoryItem) -> bool:
            return item.id in taken or bool(query.exclude_references.intersection(item.references))

        working = self._store.recent_episodic(query.working_top_k, skip=in_conversation)
        chosen += [self._scored(item, query, 0.0, Section.WORKING) for item in working]
        taken.update(item.id for item in working)

        relevance = self._relevance(query.text, query_vector)
        candidates = dict(relevance)
        for core in self._store.core(CORE_CANDIDATES_PER_TOP_K * query.semantic_top_k):
            candidates.setdefault(core.id, 0.0)
        by_layer: dict[MemoryLayer, list[ScoredItem]] = {layer: [] for layer in MemoryLayer}
        for item_id, item_relevance in candidates.items():
            found = self._store.get(item_id)
            if found is None or not found.active or in_conversation(found):
                continue
            item = found
            section = {
                MemoryLayer.SEMANTIC: Section.SEMANTIC,
                MemoryLayer.PROCEDURAL: Section.PROCEDURAL,
                MemoryLayer.EPISODIC: Section.EPISODIC,
            }[item.layer]
            by_layer[item.layer].append(self._scored(item, query, item_relevance, section))
        limits = {
            MemoryLayer.EPISODIC: query.episodic_top_k,
            MemoryLayer.SEMANTIC: query.semantic_top_k,
            MemoryLayer.PROCEDURAL: query.procedural_top_k,
        }
        for layer, scored in by_layer.items():
            scored.sort(key=lambda entry: (entry.score, entry.item.updated_at), reverse=True)
            chosen += scored[: limits[layer]]
        return RetrievalResult(chosen, len(candidates) + len(pinned) + len(working), query_vector is not None)

    def _relevance(self, text: str, query_vector: Vector | None) -> dict[str, float]:
        lexical = self._lexical.search(text, LEXICAL_CANDIDATES)
        best = max(lexical.values(), default=0.0)
        normalised = {item_id: score / best for item_id, score in lexical.items()} if best > 0 else {}
        if query_vector is None:
            return normalised
        similar = self._vectors.search(query_vector, VECTOR_CANDIDATES)
        blended: dict[str, float] = {}
        for item_id in normalised.keys() | similar.keys():
            similarity = max(similar.get(item_id, 0.0), 0.0)
            if item_id not in normalised and similarity < MIN_VECTOR_SIMILARITY:
                continue
            blended[item_id] = LEXICAL_SHARE * normalised.get(item_id, 0.0) + (1 - LEXICAL_SHARE) * similarity
        return blended

    def _scored(self, item: MemoryItem, query: MemoryQuery, relevance: float, section: str) -> ScoredItem:
        fresh = recency(item, query)
        score = (
            W_RELEVANCE * relevance + W_RECENCY * fresh + W_SALIENCE * item.salience + W_CONFIDENCE * item.confidence
        )
        parts = {"relevance": relevance, "recency": fresh, "salience": item.salience, "confidence": item.confidence}
        return ScoredItem(item, round(score, 4), section, parts)

"""`MemoryRetrievalService`: which items are worth the prompt for this message, scored 0..1.

Relevance is hybrid. The lexical side is BM25 normalised by the best match; the dense side is how far
an item's cosine similarity stands above the typical item's (see `VectorIndex.relevance`). The two
are added, and the rare words of the best matches that the message does not say are searched again at
`BRIDGE_WEIGHT` (`_bridge`: the second fact a first match points to). Then context lifts an item,
because what a question needs is rarely one isolated line (in this order, each on what the ones before
gave):

- its speaker: a message that names someone favours what that person said (`SPEAKER_WEIGHT`, for
  items written "Name: …", as group chats and imported conversations are);
- its day: an item on a day with several strong matches is lifted (`DAY_WEIGHT` × the mean of that
  day's best `DAY_TOP` matches, against the best day), since one conversation holds one topic;
- its neighbours: an episodic item takes `NEIGHBOUR_WEIGHT` of the relevance of the turns just before
  and after it in its day file (the answer to a matched question, the question to a matched answer),
  and the turns 2 to `WIDE_RING` away from the best `WIDE_SEEDS` matches join the candidates with a
  share halving at each turn further (an answer often comes a few turns after its question);
- time cues: items made inside the window a message names ("last May", "yesterday") gain
  `TIME_WEIGHT`; procedural items of the active skill gain `SKILL_WEIGHT`.

The result, divided by the best candidate's, is blended with recency (halving every
`RECENCY_HALF_LIFE_DAYS`), salience and confidence:

    score = W_RELEVANCE·relevance + W_RECENCY·recency + W_SALIENCE·salience + W_CONFIDENCE·confidence

Every candidate is returned scored; the prompt pack decides how many fit. No model call is made here:
the message's vector is computed before, once.

Candidates are scored from their facts (`ItemFacts`: layer, day, speaker, salience ...) and their
neighbours, which the store keeps in RAM for every item, not from their parsed lines: of the several hundred
candidates of a message at 100,000 items the pack reads about 130 and shows about 40, so only those (and the
few best matches whose rare words are bridged) are parsed (`RankedItem`).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import NamedTuple, overload

import numpy as np
import numpy.typing as npt

from bot.domain.conversation import kept_newest
from bot.domain.memory import LiveConversation, MemoryItem, MemoryLayer, MemoryQuery
from bot.memory.embeddings import Vector
from bot.memory.item_storage import EPISODIC_CODE, LAYERS, NO_ROW, FactsColumns, IntArray, ItemFacts, ItemStore
from bot.memory.lexical_index import Bm25Index, tokenize
from bot.memory.temporal import time_window
from bot.memory.vector_index import VectorIndex

W_RELEVANCE = 0.7
W_RECENCY = 0.1
W_SALIENCE = 0.1
W_CONFIDENCE = 0.1
RECENCY_HALF_LIFE_DAYS = 30.0
_DECAY_PER_DAY = math.log(2) / RECENCY_HALF_LIFE_DAYS
LEXICAL_CANDIDATES = 120
VECTOR_CANDIDATES = 300
DAY_WEIGHT = 0.4
DAY_TOP = 3
NEIGHBOUR_WEIGHT = 0.3
TIME_WEIGHT = 0.3
SKILL_WEIGHT = 0.5
SPEAKER_WEIGHT = 0.6
# The wider neighbourhood (`_widen`): the turns 2 to `WIDE_RING` away from the best `WIDE_SEEDS` matches.
WIDE_SEEDS = 10
WIDE_RING = 3
WIDE_DECAY = 0.5
# Rare-word bridging (`_bridge`): the words of the best `BRIDGE_SEEDS` matches found in at most
# `BRIDGE_RARE_SHARE` of the items, searched again at `BRIDGE_WEIGHT` of a full match.
BRIDGE_SEEDS = 6
BRIDGE_RARE_SHARE = 0.005
BRIDGE_WEIGHT = 0.3
BRIDGE_CANDIDATES = 40
_NAME = re.compile(r"\b[A-Z][\w'-]+\b")
_POSSESSIVE = r"['’]s"
_ENDS_POSSESSIVE = re.compile(_POSSESSIVE + "$")
_WORD = re.compile(r"\w")
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


SECTION_OF_LAYER = {
    MemoryLayer.SEMANTIC: Section.SEMANTIC,
    MemoryLayer.PROCEDURAL: Section.PROCEDURAL,
    MemoryLayer.EPISODIC: Section.EPISODIC,
}


class RankedItem(NamedTuple):
    """A candidate as retrieval scored it, before its line is parsed (the pack parses those it reads).

    A named tuple: hundreds are made for every message, and a tuple is made five times faster than a
    frozen dataclass."""

    item_id: str
    layer: MemoryLayer
    score: float
    section: str
    relevance: float
    recency: float
    salience: float
    confidence: float
    updated: float  # `updated_at`, in seconds since the epoch: the tie-break between equal scores

    @property
    def parts(self) -> dict[str, float]:
        """What made up the score (as `ScoredItem.parts`)."""
        return {
            "relevance": self.relevance,
            "recency": self.recency,
            "salience": self.salience,
            "confidence": self.confidence,
        }


class Ranking(Sequence[RankedItem]):
    """Scored candidates in an order, kept as columns: each `RankedItem` is made when it is read (a message
    scores about a thousand candidates, and its pack reads about a hundred of them).

    Per candidate: its id, its layer (an index into `LAYERS`) and section (an index into `Section.ORDER`), and a
    row of `numbers`: score, relevance, recency, salience, confidence, updated (the float fields of `RankedItem`,
    in its order); `order` holds the positions of the candidates in this ranking's order."""

    def __init__(
        self, ids: Sequence[str], layers: IntArray, sections: IntArray, numbers: FloatArray, order: IntArray
    ) -> None:
        self._ids = ids
        self._layers = layers
        self._sections = sections
        self._numbers = numbers
        self._order = order
        self._positions: list[int] = order.tolist()

    @classmethod
    def of(cls, items: Sequence[RankedItem]) -> Ranking:
        """The ranking of `items`, in their order."""
        if isinstance(items, Ranking):
            return items
        return cls(
            [entry.item_id for entry in items],
            np.array([LAYERS.index(entry.layer) for entry in items], dtype=np.int64),
            np.array([Section.ORDER.index(entry.section) for entry in items], dtype=np.int64),
            np.array([(entry[2], *entry[4:]) for entry in items], dtype=np.float64).reshape(len(items), len(_NUMBERS)),
            np.arange(len(items)),
        )

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> RankedItem: ...

    @overload
    def __getitem__(self, index: slice) -> list[RankedItem]: ...

    def __getitem__(self, index: int | slice) -> RankedItem | list[RankedItem]:
        if isinstance(index, slice):
            return [self._item(position) for position in self._positions[index]]
        return self._item(self._positions[index])

    def _item(self, position: int) -> RankedItem:
        score, relevance, recency, salience, confidence, updated = self._numbers[position].tolist()
        layer, section = LAYERS[self._layers[position]], Section.ORDER[self._sections[position]]
        # Made by `tuple.__new__` in C, without the generated `__new__` (a Python call).
        fields = (self._ids[position], layer, score, section, relevance, recency, salience, confidence, updated)
        return tuple.__new__(RankedItem, fields)

    @property
    def ids(self) -> list[str]:
        """The candidates' ids, in order."""
        return list(map(self._ids.__getitem__, self._positions))

    def layers(self) -> IntArray:
        """Each candidate's layer (an index into `LAYERS`), in order."""
        layers: IntArray = self._layers[self._order]
        return layers

    def sections(self) -> IntArray:
        """Each candidate's section (an index into `Section.ORDER`), in order."""
        sections: IntArray = self._sections[self._order]
        return sections

    def column(self, name: str) -> FloatArray:
        """One of the float fields of `RankedItem` (`score`, `relevance` ...), in order."""
        column: FloatArray = self._numbers[self._order, _NUMBERS.index(name)]
        return column

    def reordered(self, order: IntArray) -> Ranking:
        """The same candidates, those at `order` (positions in this ranking) in that order."""
        return Ranking(self._ids, self._layers, self._sections, self._numbers, self._order[order])


# The float fields of `RankedItem`, in its order: the columns of `Ranking`'s numbers.
_NUMBERS = ("score", "relevance", "recency", "salience", "confidence", "updated")
# The section of each layer (as indices into `Section.ORDER`, by index into `LAYERS`).
_SECTION_OF_LAYER = np.array([Section.ORDER.index(SECTION_OF_LAYER[layer]) for layer in LAYERS], dtype=np.int64)


@dataclass(frozen=True)
class ScoreParts:
    """A ranked candidate's score in its parts (`MemoryRetrievalService.explain`): `lexical + dense + lifts` is
    its relevance (pinned and working-set items are placed, not matched), which the score blends as
    `W_RELEVANCE·relevance + W_RECENCY·recency + W_SALIENCE·salience + W_CONFIDENCE·confidence`."""

    ranked: RankedItem
    lexical: float
    dense: float
    lifts: float


@dataclass(frozen=True)
class RetrievalResult:
    """Every candidate, scored, best first (pinned and the working set first of all)."""

    ranked: Ranking
    candidates: int
    used_vectors: bool


FloatArray = npt.NDArray[np.float64]


@dataclass
class Candidates:
    """A message's candidates in the order they were found: their ids, their rows in the facts table (`NO_ROW`
    for an id a search index gives that is no longer stored) and a value each (the match, then the relevance)."""

    ids: list[str]
    rows: IntArray
    values: FloatArray

    def extend(self, item_ids: list[str], table: FactsColumns, value: float) -> None:
        """`item_ids` (not among the candidates) added with `value`."""
        self._added(item_ids, table.rows_of(item_ids), value)

    def extend_rows(self, rows: list[int], table: FactsColumns) -> None:
        """The items at `rows` of `table` (not among the candidates) added with 0."""
        self._added(table.ids_at(rows), np.array(rows, dtype=np.int64), 0.0)

    def _added(self, item_ids: list[str], rows: IntArray, value: float) -> None:
        if item_ids:
            self.ids += item_ids
            self.rows = np.concatenate((self.rows, rows))
            self.values = np.concatenate((self.values, np.full(len(item_ids), value)))

    def places(self, rows: IntArray, table: FactsColumns) -> IntArray:
        """The place among the candidates of each of `rows` (stored items); those not among them are added with
        0, in the order they first come in `rows`."""
        places = np.full(len(rows), NO_ROW, dtype=np.int64)
        if len(self.rows):
            order = np.argsort(self.rows, kind="stable")
            ordered = self.rows[order]
            at = np.minimum(np.searchsorted(ordered, rows), len(ordered) - 1)
            places = np.where(ordered[at] == rows, order[at], NO_ROW)
        new = places == NO_ROW
        if new.any():
            unique, first = np.unique(rows[new], return_index=True)
            appearance = np.argsort(first)
            rank = np.empty(len(unique), dtype=np.int64)
            rank[appearance] = np.arange(len(unique))
            places[new] = len(self.ids) + rank[np.searchsorted(unique, rows[new])]
            self.extend_rows(unique[appearance].tolist(), table)
        return places

    def stored_ids(self) -> list[str]:
        return [self.ids[place] for place in np.flatnonzero(self.rows != NO_ROW).tolist()]

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.ids, self.values.tolist(), strict=True))


def names_in(text: str) -> set[str]:
    """The capitalised words of a message: the names it may mention ("Dave's" names Dave)."""
    return {_ENDS_POSSESSIVE.sub("", word) for word in _NAME.findall(text)}


def dense_query_text(text: str, speakers: set[str]) -> str:
    """What a message's vector is made from: the message without the names of people who speak in memory.

    Such a name says whose items to favour, which the speaker lift does; left in, it draws the vector
    to every line that merely addresses that person ("Thanks, Dave!"), which in a conversation between
    two people is half of them (on LoCoMo, multi-hop recall is clearly higher without the names).
    """
    if not speakers:
        return text
    names = "|".join(re.escape(name) for name in sorted(speakers, key=len, reverse=True))
    pattern = rf"\b(?:{names})\b(?:{_POSSESSIVE})?"
    stripped = " ".join(re.sub(pattern, " ", text).split())
    return stripped if _WORD.search(stripped) else text


def ranked_by_score(
    scored: Iterable[tuple[ItemFacts, float]], now: float, section: str | None = None
) -> list[RankedItem]:
    """Each (item, relevance) blended with the item's recency (1 for an item updated `now`, halving every
    `RECENCY_HALF_LIFE_DAYS`), salience and confidence into its score, in the section of its layer (or `section`),
    in the order given."""
    pairs = list(scored)
    if not pairs:
        return []
    facts, relevances = zip(*pairs, strict=True)
    ids, layers, _, _, _, updated, salience, confidence = zip(*facts, strict=True)
    codes = np.array([LAYERS.index(layer) for layer in layers], dtype=np.int64)
    sections = _SECTION_OF_LAYER[codes] if section is None else np.full(len(ids), Section.ORDER.index(section))
    relevance, when, salient, confident = (
        np.array(column, dtype=np.float64) for column in (relevances, updated, salience, confidence)
    )
    return list(_blended(ids, codes, sections, relevance, when, salient, confident, now, len(ids)))


def _blended(
    ids: Sequence[str],
    layers: IntArray,
    sections: IntArray,
    relevances: FloatArray,
    updated: FloatArray,
    salience: FloatArray,
    confidence: FloatArray,
    now: float,
    placed: int,
) -> Ranking:
    """The `Ranking` of these columns (see `ranked_by_score`): the first `placed` in their order, then the rest
    best first: by score, then the newer of two equal scores (of equal both, the one given first).

    The arithmetic is done a column at a time: numpy's float64 operations are the same IEEE operations, in the
    same order, as the formula written out per item (no fused multiply-add), `math.exp` is the one the formula
    uses, and `_rounded` gives `round(score, 4)`; each step a C loop, where a Python loop over the candidates
    cost more than all of their arithmetic."""
    age = np.maximum(np.subtract(now, updated), 0.0)
    fresh = np.array(list(map(math.exp, (-(age / 86400) * _DECAY_PER_DAY).tolist())), dtype=np.float64)
    score = W_RELEVANCE * relevances + W_RECENCY * fresh + W_SALIENCE * salience + W_CONFIDENCE * confidence
    rounded = np.array(_rounded(score), dtype=np.float64)
    # Descending by score then by updated, stable (a sort of the negated keys: each negation is exact).
    best_first = placed + np.lexsort((-updated[placed:], -rounded[placed:]))
    order = np.concatenate((np.arange(placed), best_first))
    numbers = np.column_stack((rounded, relevances, fresh, salience, confidence, updated))
    return Ranking(ids, layers, sections, numbers, order)


# How near to halfway between two multiples of 0.0001 a score may lie before `_rounded` asks `round` itself.
_NEAR_HALF = 1e-6


def _rounded(values: npt.NDArray[np.float64]) -> list[float]:
    """`round(value, 4)` of each value: the double nearest to the value's exact decimal rounded half to even at
    four places. `rint(value × 10⁴) / 10⁴` is that double (the division of two exact doubles rounds correctly)
    unless the product's own rounding crossed a half, which it can only do for a value within a few units in
    the last place of a half: those few are rounded by `round`."""
    scaled = values * 1e4
    nearest = np.rint(scaled)
    rounded: list[float] = (nearest / 1e4).tolist()
    for at in np.flatnonzero(np.abs(np.abs(scaled - nearest) - 0.5) < _NEAR_HALF).tolist():
        rounded[at] = round(float(values[at]), 4)
    return rounded


# The newest messages of a live conversation looked up again after a change of the store that was not only
# items added: the items a turn writes after its reply refer to its messages, which were already live (and
# looked up) when the turn's memory was read.
RECHECKED_MESSAGES = 8


class LiveCoverage:
    """The items that refer to a live conversation (it shows them already), kept per conversation as it
    grows: each time, the messages added since are looked up, and so are the items the store added since
    (a turn writes its items after its reply, when its messages were live already); after any other change
    of the store, the newest few messages are looked up again instead. So the working set's scan can pass
    over a long conversation's own items without reading them.

    Found by its ids in order (`LiveConversation.in_order`, the same list while the conversation grows);
    any other conversation is looked up whole. An item changed later to refer to an older live message (a
    fact reinforced) is not seen here; retrieval still leaves it out of the ranked candidates."""

    def __init__(self, store: ItemStore, conversations: int = 256) -> None:
        self._store = store
        self._size = conversations
        self._kept: OrderedDict[int, tuple[Sequence[str], int, int, set[str]]] = OrderedDict()

    def items_of(self, live: LiveConversation) -> set[str]:
        ids = live.in_order
        if not ids:
            return set()
        key, version = id(ids), self._store.version
        kept = self._kept.get(key)
        if kept is None or kept[0] is not ids or len(ids) < kept[1]:
            kept = (ids, 0, version, set())
        _, checked, looked_at, items = kept
        added = self._store.appended_since(looked_at) if checked else None
        if added is None:
            items.update(self._store.ids_referring_to(ids[max(0, checked - RECHECKED_MESSAGES) :]))
        else:
            items.update(
                item.id
                for item in self._store.get_many(added).values()
                if item.active and not live.ids.isdisjoint(item.references)
            )
            items.update(self._store.ids_referring_to(ids[checked:]))
        # Keyed by the list's identity: the entry holds the list, so the key is not reused meanwhile.
        kept_newest(self._kept, key, (ids, len(ids), version, items), self._size)
        return items


class WorkingSet:
    """The newest EPISODIC items outside a live conversation (`ItemStore.recent_episodic`), kept per
    conversation as it grows: while the store has only had items added since, each of them passed over
    (the conversation's own, which its coverage knows by then), the items found last time stand, less any
    now older than the window. Otherwise it is read again; in a long conversation that read passes over
    all of the conversation's own items, and it was made for every message.

    Found by its ids in order, as `LiveCoverage` is."""

    def __init__(self, store: ItemStore, conversations: int = 256) -> None:
        self._store = store
        self._size = conversations
        self._kept: OrderedDict[int, tuple[Sequence[str], int, datetime, int, list[str]]] = OrderedDict()

    def of(self, live: LiveConversation, limit: int, since: datetime, skip: Callable[[str], bool]) -> list[MemoryItem]:
        """As `recent_episodic(limit, since, skip)`; `skip` must pass over at least what it passed over the last
        time for this conversation (the conversation's coverage only grows with it)."""
        ids, version = live.in_order, self._store.version
        kept = self._kept.get(id(ids)) if ids else None
        found: list[MemoryItem] | None = None
        # Kept for the same conversation, number and a window that only moved on (a wider one reaches
        # further back than the read that found them).
        if kept is not None and kept[0] is ids and kept[1] == limit and kept[2] <= since:
            added = self._store.appended_since(kept[3])
            if added is not None and all(skip(item_id) for item_id in added) and not any(map(skip, kept[4])):
                found = [item for item in self._store.get_many(kept[4]).values() if item.created_at >= since]
        if found is None:
            found = self._store.recent_episodic(limit, since, skip)
        if ids:
            # Keyed by the list's identity: the entry holds the list, so the key is not reused meanwhile.
            kept_newest(self._kept, id(ids), (ids, limit, since, version, [item.id for item in found]), self._size)
        return found


class MemoryRetrievalService:
    """Scores one scope's items for a query."""

    def __init__(self, store: ItemStore, lexical: Bm25Index, vectors: VectorIndex, zone: tzinfo) -> None:
        self._store = store
        self._lexical = lexical
        self._vectors = vectors
        self._zone = zone
        self._covered = LiveCoverage(store)
        self._working = WorkingSet(store)

    def search(self, text: str, limit: int, query_vector: Vector | None = None) -> list[tuple[MemoryItem, float]]:
        """Items matching `text` by relevance alone (for `memory_search` and `/memory`)."""
        relevance = self._match(text, query_vector)
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
        now = query.now.timestamp()
        table = self._store.facts_table
        pinned = [item.id for item in self._store.pinned()]
        taken = set(pinned)
        since = query.now - timedelta(days=query.working_days)
        covered = self._covered.items_of(query.live)
        working = [
            item.id
            for item in self._working.of(query.live, query.working_top_k, since, lambda i: i in taken or i in covered)
        ]
        taken.update(working)

        found = self._relevance(query, query_vector, covered)
        listed = set(found.ids)
        core = [item.id for item in self._store.core(CORE_CANDIDATES_PER_TOP_K * query.semantic_top_k)]
        found.extend([item_id for item_id in dict.fromkeys(core) if item_id not in listed], table, 0.0)
        ids, rows = found.ids, found.rows
        if query.live.ids:
            # The candidates known to refer to the live conversation are left out as they are; only the
            # others are looked up (an item may refer to an older live message: see `LiveCoverage`).
            unsure = [item_id for item_id in ids if item_id not in covered]
            taken.update(item_id for item_id in ids if item_id in covered)
            taken.update(self._store.referring_among(unsure, query.live.ids))
        # Pinned first, then the working set (each as it came, if still stored), then the active candidates not
        # taken, scored and ranked.
        kept = (rows != NO_ROW) & table.active[np.maximum(rows, 0)] & ~np.isin(rows, table.rows_of(taken))
        at = np.flatnonzero(kept)
        placed = [table.rows_of(pinned), table.rows_of(working)]
        placed = [part[part != NO_ROW] for part in placed]
        chosen = np.concatenate((*placed, rows[at]))
        layers = table.layer[chosen].astype(np.int64)
        sections = np.concatenate(
            (
                np.full(len(placed[0]), Section.ORDER.index(Section.PINNED)),
                np.full(len(placed[1]), Section.ORDER.index(Section.WORKING)),
                _SECTION_OF_LAYER[layers[len(placed[0]) + len(placed[1]) :]],
            )
        )
        relevance = np.concatenate((np.ones(len(placed[0])), np.zeros(len(placed[1])), found.values[at]))
        first = len(placed[0]) + len(placed[1])
        ranked = _blended(
            table.ids_at(chosen[:first].tolist()) + list(map(ids.__getitem__, at.tolist())),
            layers, sections, relevance, table.updated[chosen], table.salience[chosen], table.confidence[chosen],
            now, first,
        )  # fmt: skip
        return RetrievalResult(ranked, len(ids) + first, query_vector is not None)

    def _match(self, text: str, query_vector: Vector | None) -> dict[str, float]:
        """Lexical plus dense relevance of the best candidates of each (unnormalised, 0..2)."""
        match, dense = self._match_parts(text, query_vector)
        for item_id, value in dense.items():
            match[item_id] = match.get(item_id, 0.0) + value
        return match

    def _match_parts(self, text: str, query_vector: Vector | None) -> tuple[dict[str, float], dict[str, float]]:
        """The lexical relevance (BM25 over the best match's) and the dense relevance of the best candidates of each."""
        lexical = self._lexical.search(text, LEXICAL_CANDIDATES)
        best = max(lexical.values(), default=0.0)
        match = {item_id: score / best for item_id, score in lexical.items()} if best > 0 else {}
        dense = {} if query_vector is None else self._vectors.relevance(query_vector, VECTOR_CANDIDATES)
        return match, dense

    def _relevance(self, query: MemoryQuery, query_vector: Vector | None, covered: set[str]) -> Candidates:
        """Each candidate's relevance 0..1: the match lifted by its day, its neighbours, time and skill. When
        every candidate is in `covered` (the live conversation's own items, which are left out of the ranking),
        each is given 0 unscored."""
        found = self._lifted(query, query_vector, covered)
        best = float(found.values.max()) if len(found.values) else 0.0
        if best > 0:
            found.values = found.values / best
        return found

    def _lifted(self, query: MemoryQuery, query_vector: Vector | None, covered: set[str]) -> Candidates:
        """Each candidate's match with its lifts, before it is divided by the best (see `_relevance`)."""
        match = self._match(query.text, query_vector)
        self._bridge(query.text, match)
        table = self._store.facts_table
        found = Candidates(list(match), table.rows_of(match), np.fromiter(match.values(), np.float64, len(match)))
        named = names_in(query.text)
        codes = table.speaker_codes(named) if named else []
        if codes:
            spoken = (found.rows != NO_ROW) & np.isin(table.speaker[np.maximum(found.rows, 0)], codes)
            found.values[spoken] += SPEAKER_WEIGHT
        if query.active_skill:
            skilled = [
                item.id for item in self._store.in_layer(MemoryLayer.PROCEDURAL) if query.active_skill in item.tags
            ]
            at = {item_id: place for place, item_id in enumerate(found.ids)}
            added = []
            for item_id in skilled:
                if item_id in table:
                    place = at.get(item_id)
                    if place is None:
                        added.append(item_id)
                    else:
                        found.values[place] += SKILL_WEIGHT
            found.extend(added, table, SKILL_WEIGHT)
        stored = found.rows != NO_ROW
        episodic = np.flatnonzero(stored & (table.layer[np.maximum(found.rows, 0)] == EPISODIC_CODE))
        lifted = found.values.copy()
        self._lift_by_day(table, found, episodic, lifted)
        # The EPISODIC candidates of relevance above 0 lift the active EPISODIC turns just before and after them.
        sources = episodic[lifted[episodic] > 0]
        around = np.stack((table.before[found.rows[sources]], table.after[found.rows[sources]]), axis=1).ravel()
        near = table.episodic_at(around)
        neighbours, lifting = around[near], np.repeat(sources, 2)[near]
        known = len(found.ids)
        places = found.places(neighbours, table)
        lifted = np.concatenate((lifted, np.zeros(len(found.ids) - known)))
        if covered and covered.issuperset(stored_ids := found.stored_ids()):
            # All of them the conversation the model is sent anyway (a chat whose memory is still all live):
            # nothing would be ranked, so nothing is scored.
            rows = found.rows[found.rows != NO_ROW]
            return Candidates(stored_ids, rows, np.zeros(len(rows)))
        # What each candidate had before the neighbours' lifts (none for the neighbours it brought in).
        base = lifted.copy()
        np.maximum.at(lifted, places, base[places] + NEIGHBOUR_WEIGHT * base[lifting])
        lifted = self._widen(table, found, sources, base, lifted)
        window = time_window(query.text, query.now.astimezone(self._zone))
        if window is not None:
            first, last = (day.toordinal() for day in window)
            days = table.day[np.maximum(found.rows, 0)]
            lifted[(found.rows != NO_ROW) & (days >= first) & (days <= last)] += TIME_WEIGHT
        found.values = lifted
        return found

    def _bridge(self, text: str, match: dict[str, float]) -> None:
        """Rare words of the best matches that the message does not say, searched as a second, weaker query:
        the second fact a first strong match points to ("Which animal did Jon adopt?" finds "we adopted a
        greyhound and named her Zephyr", whose rare "Zephyr" finds "Zephyr chewed my shoes"). Rare: in at
        most `BRIDGE_RARE_SHARE` of the items, so a speaker's name or a common word bridges nothing."""
        if BRIDGE_WEIGHT <= 0 or not match:
            return
        seeds = sorted(match, key=match.__getitem__, reverse=True)[:BRIDGE_SEEDS]
        asked = set(tokenize(text))
        terms: set[str] = set()
        for item in self._store.get_many(seeds).values():
            terms |= self._lexical.rare_terms(item.content, BRIDGE_RARE_SHARE)
        terms -= asked
        found = self._lexical.search_terms(terms, BRIDGE_CANDIDATES)
        best = max(found.values(), default=0.0)
        for item_id, score in found.items():
            match[item_id] = match.get(item_id, 0.0) + BRIDGE_WEIGHT * score / best

    @staticmethod
    def _lift_by_day(table: FactsColumns, found: Candidates, episodic: IntArray, lifted: FloatArray) -> None:
        """The EPISODIC candidates (at `episodic`) lifted by the strength of their day: the mean of its best
        `DAY_TOP` matches, against the strongest day's."""
        if not len(episodic):
            return
        days, matches = table.day[found.rows[episodic]], found.values[episodic]
        order = np.lexsort((matches, days))  # by day, each day's matches ascending
        in_order = days[order]
        starts = np.flatnonzero(np.concatenate(([True], in_order[1:] != in_order[:-1])))
        ends = np.append(starts[1:], len(order)).tolist()
        ascending = matches[order].tolist()
        # Summed by `sum` over each day's best, as the formula is written (its rounding is the reference).
        strength = [
            sum(ascending[max(start, end - DAY_TOP) : end]) / DAY_TOP
            for start, end in zip(starts.tolist(), ends, strict=True)
        ]
        strongest = max(strength)
        if strongest <= 0:
            return
        day_of = np.empty(len(order), dtype=np.int64)
        day_of[order] = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
        lifted[episodic] += (DAY_WEIGHT * np.array(strength) / strongest)[day_of]

    @staticmethod
    def _widen(
        table: FactsColumns, found: Candidates, sources: IntArray, base: FloatArray, lifted: FloatArray
    ) -> FloatArray:
        """The turns 2 to `WIDE_RING` away from the best `WIDE_SEEDS` matches (of `sources`, by `base`) take a
        share of their relevance (`NEIGHBOUR_WEIGHT`, times `WIDE_DECAY` for each turn further): an answer is
        often a few turns after the question it answers. Returns `lifted` with the turns reached added."""
        if WIDE_RING < 2 or WIDE_SEEDS <= 0 or not len(sources):
            return lifted
        ranked = sources[np.argsort(-base[sources], kind="stable")[:WIDE_SEEDS]].tolist()
        seeds = [(seed, int(found.rows[seed])) for seed in ranked if base[seed] > 0]
        ring = {row: table.around(row) for _, row in seeds}
        reached = {row: {row, *ring[row]} for _, row in seeds}
        # The places of the candidates among the turns reached, looked up a ring at a time.
        by_row = np.argsort(found.rows, kind="stable")
        in_row_order = found.rows[by_row]
        place_of: dict[int, int] = {}
        known = len(base)
        added: list[int] = []  # the rows of the turns reached that were not candidates
        added_lifted: list[float] = []
        share = NEIGHBOUR_WEIGHT
        for _ in range(2, WIDE_RING + 1):
            share *= WIDE_DECAY
            further = {row: table.around(row) for rows in ring.values() for row in rows}
            wanted = np.array([row for rows in further.values() for row in rows if row not in place_of], dtype=np.int64)
            at = np.minimum(np.searchsorted(in_row_order, wanted), len(in_row_order) - 1)
            hits = in_row_order[at] == wanted
            place_of.update(zip(wanted[hits].tolist(), by_row[at][hits].tolist(), strict=True))
            for seed, seed_row in seeds:
                lift = share * base[seed]
                next_ring = []
                for near in ring[seed_row]:
                    for row in further[near]:
                        if row in reached[seed_row]:
                            continue
                        reached[seed_row].add(row)
                        next_ring.append(row)
                        place = place_of.get(row)
                        if place is None:
                            place = place_of[row] = known + len(added)
                            added.append(row)
                            added_lifted.append(0.0)
                        if place < known:
                            lifted[place] = max(lifted[place], base[place] + lift)
                        else:
                            added_lifted[place - known] = max(added_lifted[place - known], 0.0 + lift)
                ring[seed_row] = next_ring
        found.extend_rows(added, table)
        return np.concatenate((lifted, added_lifted)) if added else lifted

    def explain(self, query: MemoryQuery, query_vector: Vector | None = None) -> list[ScoreParts]:
        """The ranking `retrieve` makes for `query`, each score in the parts that made it: the lexical and
        dense match and the lifts, in the units of the relevance they add up to, then the blend."""
        lexical, dense = self._match_parts(query.text, query_vector)
        lifted = self._lifted(query, query_vector, self._covered.items_of(query.live)).as_dict()
        best = max(lifted.values(), default=0.0) or 1.0
        explained = []
        for entry in self.retrieve(query, query_vector).ranked:
            match = lexical.get(entry.item_id, 0.0) + dense.get(entry.item_id, 0.0)
            lifts = lifted.get(entry.item_id, 0.0) - match
            explained.append(
                ScoreParts(
                    entry, lexical.get(entry.item_id, 0.0) / best, dense.get(entry.item_id, 0.0) / best, lifts / best
                )
            )
        return explained

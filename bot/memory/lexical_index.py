"""`Bm25Index`: an in-memory inverted index with Okapi BM25 scoring, updated item by item.

Why not a library: the BM25 packages on PyPI either index a fixed corpus (`bm25s`: any added or
edited item means rebuilding the whole index) or score every document on every query (`rank-bm25`:
O(items) per query term, too slow for a large memory). Memory items are added every turn and
hand edits remove and re-add them, so the index must take single additions and removals cheaply;
an inverted index does that in a few dozen lines and answers a query by touching only the postings
of its terms, scored with numpy.
"""

from __future__ import annotations

import functools
import math
import re
from array import array
from collections import Counter
from typing import cast

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem
from bot.domain.text import STOPWORDS
from bot.memory.search_keys import search_keys

K1 = 1.2
B = 0.75
MAX_TERM_FREQUENCY = 65535
# Up to this many (term, item) pairs, a batch is indexed posting by posting instead of grouped with numpy.
SMALL_BATCH_TERMS = 256
# Dead slots are compacted away once there are more of them than live ones, and at least this many.
COMPACT_MIN_DEAD = 1024
_WORD = re.compile(r"\w+")
_SUFFIXES = ("ing", "ed", "es", "s")


@functools.lru_cache(maxsize=1 << 16)
def _term(word: str) -> str | None:
    """The index term of a lower-cased word: its stem, or None for stopwords and one-letter words."""
    if len(word) < 2 or word in STOPWORDS:
        return None
    for suffix in _SUFFIXES:
        if len(word) >= len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased word stems without stopwords or one-letter words."""
    return [term for term in map(_term, _WORD.findall(text.lower())) if term is not None]


class _Postings:
    """One term's postings: document slots and term frequencies, appended in C (`array`) and read by
    numpy without a copy. A frequency is kept in 16 bits (capped at `MAX_TERM_FREQUENCY`, where BM25 has
    long saturated): 2 bytes a posting less than float32, about 5 MB at 100,000 items."""

    __slots__ = ("slots", "tfs")

    def __init__(self) -> None:
        self.slots = array("i")
        self.tfs = array("H")

    def arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16]]:
        # Views on the arrays' buffers: callers must not keep them past the query (appends need them gone).
        return np.frombuffer(self.slots, dtype=np.int32), np.frombuffer(self.tfs, dtype=np.uint16)

    def replace(self, slots: npt.NDArray[np.int32], tfs: npt.NDArray[np.uint16]) -> None:
        self.slots = array("i", slots.astype(np.int32).tobytes())
        self.tfs = array("H", tfs.astype(np.uint16).tobytes())


class Bm25Index:
    """Documents (memory items) by id; `search` returns BM25 scores of those sharing a query term.

    Each document gets a slot; a removal only clears the slot's `alive` flag (postings are filtered
    by it when scoring), and the arrays are compacted once dead slots outnumber the live ones. A
    query costs a few vectorised operations per query term, whatever the number of documents.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every document (the store is rebuilding what it holds)."""
        self._postings: dict[str, _Postings] = {}
        self._slot_of: dict[str, int] = {}
        self._ids: list[str] = []
        self._lengths = np.zeros(1024, dtype=np.float32)
        self._alive = np.zeros(1024, dtype=bool)
        self._total_length = 0.0
        # Bumped by every change; the last search is kept for it (a message's candidates are looked up
        # ahead of its scoring, while its vector is made: see `MemoryService`).
        self._version = 0
        self._last: tuple[int, str, int, dict[str, float]] | None = None
        # Each document's length normalisation (`_norms`), for the version it was computed at.
        self._kept_norms: tuple[int, npt.NDArray[np.float32]] | None = None

    def __len__(self) -> int:
        return len(self._slot_of)

    def add(self, item: MemoryItem) -> None:
        self.add_many([item])

    def add_many(self, items: list[MemoryItem]) -> None:
        """Index items in one batch: per-term work is done once per batch, not once per item."""
        self._version += 1
        for item in items:
            self.remove(item.id)
        terms: list[str] = []
        slots: list[int] = []
        tfs: list[int] = []
        for item in items:
            if not item.active:
                continue
            # Its words, its tags and its search keys (the regions of the places it names, the dates its
            # relative dates meant): found by any, shown by its words alone.
            indexed = f"{item.content} {' '.join(item.tags)} {search_keys(item)}"
            with_none = Counter(map(_term, _WORD.findall(indexed.lower())))
            with_none.pop(None, None)
            counts = cast(Counter[str], with_none)
            slot = self._new_slot(item.id, sum(counts.values()))
            terms.extend(counts)
            tfs.extend(counts.values())
            slots.extend([slot] * len(counts))
        if not terms:
            return
        if len(terms) <= SMALL_BATCH_TERMS:
            # A turn's few items: appended one posting at a time, which costs less than the numpy calls
            # of the grouping below. Same postings, same order.
            for term, slot, tf in zip(terms, slots, tfs, strict=True):
                postings = self._postings.get(term)
                if postings is None:
                    postings = self._postings[term] = _Postings()
                postings.slots.append(slot)
                postings.tfs.append(min(tf, MAX_TERM_FREQUENCY))
            return
        vocabulary: dict[str, int] = {}
        term_ids = np.fromiter((vocabulary.setdefault(t, len(vocabulary)) for t in terms), np.int32, len(terms))
        order = np.argsort(term_ids, kind="stable")
        sorted_ids = term_ids[order]
        slot_array = np.asarray(slots, dtype=np.int32)[order]
        tf_array = np.minimum(np.asarray(tfs, dtype=np.int64), MAX_TERM_FREQUENCY).astype(np.uint16)[order]
        bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
        names = list(vocabulary)
        for start, end in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(terms)])), strict=True):
            term = names[sorted_ids[start]]
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.slots.frombytes(slot_array[start:end].tobytes())
            postings.tfs.frombytes(tf_array[start:end].tobytes())

    def _new_slot(self, item_id: str, length: int) -> int:
        slot = len(self._ids)
        if slot == len(self._lengths):
            self._lengths = np.resize(self._lengths, 2 * slot)
            self._alive = np.resize(self._alive, 2 * slot)
        self._ids.append(item_id)
        self._slot_of[item_id] = slot
        self._lengths[slot] = length
        self._alive[slot] = True
        self._total_length += length
        return slot

    def remove(self, item_id: str) -> None:
        self._version += 1
        slot = self._slot_of.pop(item_id, None)
        if slot is None:
            return
        self._alive[slot] = False
        self._total_length -= float(self._lengths[slot])
        dead = len(self._ids) - len(self._slot_of)
        if dead > COMPACT_MIN_DEAD and dead > len(self._slot_of):
            self._compact()

    def search(self, query: str, limit: int) -> dict[str, float]:
        """The `limit` best-scoring ids for `query`, with their raw BM25 scores."""
        last = self._last
        if last is not None and last[:3] == (self._version, query, limit):
            return dict(last[3])
        found = self._search(query, limit)
        self._last = (self._version, query, limit, dict(found))
        return found

    def rare_terms(self, text: str, share: float) -> set[str]:
        """The terms of `text` found in at least one other document and in at most `share` of them all (or in
        two, in a small index)."""
        most = max(share * len(self._slot_of), 2)
        found = set()
        for term in set(tokenize(text)):
            postings = self._postings.get(term)
            if postings is not None and 2 <= len(postings.slots) <= most:
                found.add(term)
        return found

    def search_terms(self, terms: set[str], limit: int) -> dict[str, float]:
        """As `search`, for terms already made (`tokenize`, `rare_terms`)."""
        return self._scores(terms, limit)

    def _search(self, query: str, limit: int) -> dict[str, float]:
        return self._scores(set(tokenize(query)), limit)

    def _scores(self, terms: set[str], limit: int) -> dict[str, float]:
        count = len(self._slot_of)
        if count == 0 or not terms:
            return {}
        used = len(self._ids)
        alive = self._alive[:used]
        norms = self._norms(used, max(self._total_length / count, 1.0))
        scores = np.zeros(used, dtype=np.float32)
        # Without removed documents every posting is live: the filtering by `alive` is skipped.
        all_alive = used == count
        # In one order whatever the set's (which follows the process's string hashing): float32 sums in another
        # order differ in their last bits, and so would the order of two near-equal items from run to run.
        for term in sorted(terms):
            postings = self._postings.get(term)
            if postings is None:
                continue
            all_slots, all_tfs = postings.arrays()
            if all_alive:
                slots, tfs = all_slots, all_tfs.astype(np.float32)
                frequency = len(slots)
            else:
                live = alive[all_slots]
                frequency = int(np.count_nonzero(live))
                if frequency == 0:
                    continue
                slots = all_slots[live]
                tfs = all_tfs[live].astype(np.float32)
            idf = math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
            scores[slots] += idf * tfs * (K1 + 1) / (tfs + norms[slots])
            del all_slots, all_tfs, slots  # views on the postings' buffers, which appends need released
        # Over a boolean mask: `nonzero` of the float scores themselves takes several times longer.
        hits = np.flatnonzero(scores != 0)
        if len(hits) > limit:
            hits = hits[np.argpartition(-scores[hits], limit)[:limit]]
        return {self._ids[slot]: float(scores[slot]) for slot in hits}

    def _norms(self, used: int, average_length: float) -> npt.NDArray[np.float32]:
        """`K1 · (1 − B + B · length / average length)` of each of the first `used` documents (float32, each
        the value a search would compute for it), kept until the index changes: a search gathers it for its
        postings instead of computing it again from their lengths."""
        kept = self._kept_norms
        if kept is None or kept[0] != self._version:
            kept = self._kept_norms = (self._version, K1 * (1 - B + B * self._lengths[:used] / average_length))
        return kept[1]

    def _compact(self) -> None:
        """Drop dead slots from every array, renumbering the live ones in order."""
        used = len(self._ids)
        alive = self._alive[:used]
        new_slot = np.cumsum(alive, dtype=np.int64) - 1
        for term in list(self._postings):
            postings = self._postings[term]
            slots, tfs = postings.arrays()
            keep = alive[slots]
            if not keep.any():
                del self._postings[term]
                continue
            new_slots, new_tfs = new_slot[slots[keep]].astype(np.int32), tfs[keep]
            del slots, tfs
            postings.replace(new_slots, new_tfs)
        self._ids = [item_id for item_id, live in zip(self._ids, alive, strict=True) if live]
        self._lengths = np.concatenate([self._lengths[:used][alive], np.zeros(1024, dtype=np.float32)])
        self._alive = np.concatenate([np.ones(len(self._ids), dtype=bool), np.zeros(1024, dtype=bool)])
        self._slot_of = {item_id: slot for slot, item_id in enumerate(self._ids)}

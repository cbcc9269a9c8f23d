"""`VectorIndex`: the items' vectors in RAM, quantised to int8, and the search over them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem
from bot.memory import vector_search
from bot.memory.embeddings import EMBED_BATCH_SIZE, Matrix, Vector, quantize, text_key
from bot.memory.vector_search import RowSum, SignCodes

# Similarities are computed this many rows at a time, converted from int8 to float32 in a buffer that stays
# in the CPU cache: faster than one float32 product over every row (the memory bus is the limit) and than
# larger chunks (bench/vector_prefilter.py, bench/memory_retrieval.py).
SEARCH_CHUNK_ROWS = 1024
# Below this many items a z-score says little: an item counts as similar from this cosine on (with the
# bundled e5 model a paraphrase scores above it, unrelated short texts below).
MIN_ITEMS_FOR_SPREAD = 32
SIMILAR_COSINE = 0.84


class VectorIndex:
    """Unit vectors of the items' texts, quantised to int8 (one scale per row); cosine similarity against
    all rows at once.

    Rows are keyed by text, not by item: two items with the same text share one, and a row whose text
    no item holds any more (an edit, a forget) stays until stale rows are a quarter of the matrix,
    when it is compacted. A row is a quarter of a float32 one: a search converts `SEARCH_CHUNK_ROWS` rows
    at a time to float32 in a buffer that stays in the CPU cache, which is faster than one float32 product
    over many rows and ranks the same items (the int8 rounding moves a cosine in the third decimal).
    Above `EXACT_SEARCH_MAX_ROWS` rows only a short list chosen by sign codes is scored exactly, and the
    mean cosine comes from the rows' sum (`bot.memory.vector_search`).

    Texts are not kept: with `items` (the store's batch get) the texts of rows still to embed are read
    from the store when asked for; without it (a stand-alone index) they are kept until embedded.
    """

    def __init__(self, items: Callable[[Iterable[str]], dict[str, MemoryItem]] | None = None) -> None:
        self._items = items
        self._key_of: dict[str, str] = {}  # item id -> text key
        self._ids_of: dict[str, list[str]] = {}  # text key -> active item ids
        self._text_of: dict[str, str] = {}  # text key -> text, for rows to embed (only without `items`)
        self._row_of: dict[str, int] = {}  # text key -> row
        self._row_keys: list[str] = []
        # By row, its text's list in `_ids_of` (the same list object; empty or None once no item holds the text):
        # a search reads a row's items without looking its text up.
        self._row_ids: list[list[str] | None] = []
        self._matrix: npt.NDArray[np.int8] | None = None  # capacity rows; the first len(_row_keys) are in use
        self._scales: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        # The sum of the rows in use (the cosines' mean) and, above `EXACT_SEARCH_MAX_ROWS` rows, their sign
        # codes (the short list a search scores exactly): see `bot.memory.vector_search`. Kept up to date
        # by each write once built; None: built by `prepare_search` (in a thread after a restart's cache
        # read, or by the next search).
        self._sum: RowSum | None = None
        self._codes: SignCodes | None = None
        self._buffer: Matrix = np.zeros((0, 0), dtype=np.float32)
        # Text keys that may lack a vector (checked again by `pending`): keeps `has_pending` cheap.
        self._missing: set[str] = set()
        self.embedder_name: str | None = None
        # Bumped by every change; the last search is kept for it (see `relevance`).
        self._version = 0
        self._last: tuple[tuple[int, bytes, int], dict[str, float]] | None = None

    # -- following the store (ItemIndex) ------------------------------------------------------------

    def add(self, item: MemoryItem) -> None:
        self._version += 1
        self.remove(item.id)
        if item.active:
            key = text_key(item.content)
            self._key_of[item.id] = key
            ids = self._ids_of.get(key)
            if ids is None:
                ids = self._ids_of[key] = []
                row = self._row_of.get(key)
                if row is not None:
                    self._row_ids[row] = ids
            ids.append(item.id)
            if key not in self._row_of:
                self._missing.add(key)
                if self._items is None:
                    self._text_of[key] = item.content

    def add_many(self, items: list[MemoryItem]) -> None:
        for item in items:
            self.add(item)

    def remove(self, item_id: str) -> None:
        self._version += 1
        key = self._key_of.pop(item_id, None)
        if key is None:
            return
        ids = self._ids_of.get(key, [])
        if item_id in ids:
            ids.remove(item_id)
        if not ids:
            self._ids_of.pop(key, None)
            self._text_of.pop(key, None)

    def clear(self) -> None:
        """Forget every item (their rows stay, and are reused by the texts added again)."""
        self._version += 1
        self._key_of.clear()
        self._ids_of.clear()
        self._row_ids = [None] * len(self._row_keys)
        self._text_of.clear()
        self._missing.clear()

    # -- filling ------------------------------------------------------------------------------------

    def use_embedder(self, name: str) -> None:
        """Vectors of another embedder are not comparable: switching drops them."""
        self._version += 1
        if self.embedder_name != name:
            self.embedder_name = name
            self._drop_rows()
            self._missing = set(self._ids_of)

    def wanted_keys(self) -> set[str]:
        return set(self._ids_of)

    @property
    def has_pending(self) -> bool:
        return bool(self._missing)

    def pending(self) -> list[tuple[str, str]]:
        """(text key, text) of every active item without a vector yet."""
        self._missing = {key for key in self._missing if key in self._ids_of and key not in self._row_of}
        keys = sorted(self._missing)
        if self._items is None:
            return [(key, self._text_of[key]) for key in keys]
        found = self._items([self._ids_of[key][0] for key in keys])
        return [(key, item.content) for key in keys if (item := found.get(self._ids_of[key][0])) is not None]

    def put(self, vectors: dict[str, npt.NDArray[np.floating]]) -> None:
        if vectors:
            rows, scales = quantize(np.stack([np.asarray(vector, dtype=np.float32) for vector in vectors.values()]))
            self.put_quantized(list(vectors), rows, scales)

    def put_quantized(self, keys: list[str], rows: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> None:
        """Store rows made by `quantize`, one per text key (a whole cache read arrives this way)."""
        self._version += 1
        if not keys:
            return
        dimensions = rows.shape[1]
        if self._matrix is not None and self._matrix.shape[1] != dimensions:
            self._drop_rows()
        if len(self._row_keys) > 1024 and len(self._row_keys) > 4 * max(len(self._ids_of), 1) / 3:
            self._compact()
        new_rows = sum(1 for key in keys if key not in self._row_of)
        used_before = len(self._row_keys)
        self._reserve(used_before + new_rows, dimensions)
        assert self._matrix is not None
        targets = np.empty(len(keys), dtype=np.int64)
        for number, key in enumerate(keys):
            row = self._row_of.get(key)
            if row is None:
                row = len(self._row_keys)
                # The key object the items hold, so the row does not keep a second copy of the string.
                ids = self._ids_of.get(key)
                if ids:
                    key = self._key_of.get(ids[0], key)
                self._row_of[key] = row
                self._row_keys.append(key)
                self._row_ids.append(ids)
            targets[number] = row
            self._missing.discard(key)
            self._text_of.pop(key, None)
        # Overwritten rows leave the sum before their new values enter it (each row once).
        written = np.unique(targets)
        if self._sum is not None:
            overwritten = written[written < used_before]
            self._sum.add(self._matrix[overwritten], self._scales[overwritten], sign=-1)
        self._matrix[targets] = rows
        self._scales[targets] = scales
        if self._sum is not None:
            self._sum.add(self._matrix[written], self._scales[written])
        if self._codes is not None:
            self._codes.set(written, self._matrix[written], self._scales[written])

    def reserve(self, rows: int, dimensions: int) -> None:
        """Make room for exactly `rows` more rows (before a cache read arrives in batches)."""
        self._reserve(len(self._row_keys) + rows, dimensions, slack=False)

    def _reserve(self, rows: int, dimensions: int, slack: bool = True) -> None:
        """Room for `rows` rows: grown once per call, by a quarter more than asked (a restart's whole cache
        arrives in one call, and doubling then would hold three copies of it at the peak)."""
        if self._matrix is not None and rows <= self._matrix.shape[0]:
            return
        used = len(self._row_keys)
        capacity = max(1024, rows + rows // 4 if slack else rows + EMBED_BATCH_SIZE)
        grown = np.zeros((capacity, dimensions), dtype=np.int8)
        scales = np.zeros(capacity, dtype=np.float32)
        if self._matrix is not None:
            grown[:used] = self._matrix[:used]
            scales[:used] = self._scales[:used]
        self._matrix, self._scales = grown, scales
        if self._codes is not None:
            self._codes.grow(capacity)

    def _drop_rows(self) -> None:
        self._row_of.clear()
        self._row_keys = []
        self._row_ids = []
        self._matrix = None
        self._sum = self._codes = None

    def prepare_search(self) -> None:
        """Build what a search needs that writes have not kept up (the rows' sum, their sign codes): after a
        restart's cache read or a compaction, a pass over every row (long at scale: run it in a thread,
        under the scope's lock)."""
        if self._matrix is None:
            return
        used = len(self._row_keys)
        if self._sum is None:
            self._sum = RowSum(self._matrix.shape[1])
            self._sum.add(self._matrix[:used], self._scales[:used])
        if self._codes is None and used > vector_search.EXACT_SEARCH_MAX_ROWS:
            self._codes = SignCodes(self._sum.mean_row(), len(self._matrix))
            self._codes.set(np.arange(used), self._matrix[:used], self._scales[:used])

    def _compact(self) -> None:
        """Drop the rows no item's text uses any more."""
        self._version += 1
        if self._matrix is None:
            return
        keep = [key for key in self._row_keys if key in self._ids_of]
        rows = [self._row_of[key] for key in keep]
        capacity = max(1024, len(keep) + len(keep) // 4)
        matrix = np.zeros((capacity, self._matrix.shape[1]), dtype=np.int8)
        matrix[: len(keep)] = self._matrix[rows]
        scales = np.zeros(capacity, dtype=np.float32)
        scales[: len(keep)] = self._scales[rows]
        self._matrix, self._scales = matrix, scales
        self._row_keys = keep
        self._row_ids = [self._ids_of[key] for key in keep]
        self._row_of = {key: row for row, key in enumerate(keep)}
        self._sum = self._codes = None

    @property
    def rows(self) -> int:
        """Rows in use, stale ones included."""
        return len(self._row_keys)

    @property
    def coverage(self) -> tuple[int, int]:
        """(items with a vector, active items)."""
        return sum(len(ids) for key, ids in self._ids_of.items() if key in self._row_of), len(self._key_of)

    # -- searching ----------------------------------------------------------------------------------

    def _similarities(self, query: Vector, rows: npt.NDArray[np.intp] | None = None) -> Vector:
        """Cosine of `query` with each row in `rows` (every row in use when None), `SEARCH_CHUNK_ROWS` at a
        time: one small product per chunk also keeps BLAS on one thread (a product of a few thousand rows
        goes to its thread pool, which on a busy machine waits for a core far longer than the product takes)."""
        assert self._matrix is not None
        if self._buffer.shape != (SEARCH_CHUNK_ROWS, self._matrix.shape[1]):
            self._buffer = np.empty((SEARCH_CHUNK_ROWS, self._matrix.shape[1]), dtype=np.float32)
        query = np.asarray(query, dtype=np.float32)
        count = len(self._row_keys) if rows is None else len(rows)
        out = np.empty(count, dtype=np.float32)
        for start in range(0, count, SEARCH_CHUNK_ROWS):
            end = min(start + SEARCH_CHUNK_ROWS, count)
            chunk = self._buffer[: end - start]
            chunk[...] = self._matrix[start:end] if rows is None else self._matrix[rows[start:end]]
            np.matmul(chunk, query, out=out[start:end])
        out *= self._scales[:count] if rows is None else self._scales[rows]
        return out

    def relevance(self, query: Vector, limit: int) -> dict[str, float]:
        """The `limit` items most similar to `query`, each scored 0..1 against the rest.

        A raw cosine means little on its own (every text is somewhat similar to every other), so the
        score is how far an item stands above the typical one: its z-score among all items, clipped
        at 0 and divided by the best one's. The last answer is kept until anything changes (a message's
        is computed ahead of its scoring, beside other work: see `MemoryService`).
        """
        asked = (self._version, np.asarray(query, dtype=np.float32).tobytes(), limit)
        last = self._last
        if last is not None and last[0] == asked:
            return dict(last[1])
        found = self._relevance(query, limit)
        self._last = (asked, dict(found))
        return found

    def _relevance(self, query: Vector, limit: int) -> dict[str, float]:
        used = len(self._row_keys)
        if self._matrix is None or used == 0 or self._matrix.shape[1] != query.shape[0]:
            return {}
        query = np.asarray(query, dtype=np.float32)
        if len(self._key_of) < MIN_ITEMS_FOR_SPREAD:
            # Too few items to know what "typical" is: an absolute similarity decides instead.
            similarities = self._similarities(query)
            return {
                item_id: float(similarities[row])
                for row in np.flatnonzero(similarities >= SIMILAR_COSINE)
                for item_id in self._ids_of.get(self._row_keys[row], ())
            }
        self.prepare_search()
        assert self._sum is not None
        # Stale rows (texts no item holds) may be among the best: look a little further.
        wanted = min(used, 2 * limit)
        rows: npt.NDArray[np.intp] | None = None  # every row in use, or the short list
        if self._codes is not None:
            rows = self._codes.shortlist(
                query, used, max(vector_search.SHORTLIST_MIN_FACTOR * wanted, int(vector_search.SHORTLIST_SHARE * used))
            )
        similarities = self._similarities(query, rows)
        # The z-score's spread cancels in the ratio to the best: (cosine - mean) / (best cosine - mean).
        above = similarities - self._sum.mean_cosine(query)
        best_above = float(above.max())
        if best_above <= 1e-6:
            return {}
        best = np.argpartition(-above, wanted - 1)[:wanted] if len(above) > wanted else np.arange(len(above))
        # Best first (a stable sort: of equal values, the first found first); those above the mean lead.
        best = best[np.argsort(-above[best], kind="stable")]
        best = best[: int(np.count_nonzero(above[best] > 0))]
        # Each score as the double `value / best_above` of Python numbers (the same division), read at once.
        scores = (above[best].astype(np.float64) / best_above).tolist()
        found: dict[str, float] = {}
        row_ids = map(self._row_ids.__getitem__, (best if rows is None else rows[best]).tolist())
        for item_ids, score in zip(row_ids, scores, strict=True):
            if len(found) >= limit:
                break
            for item_id in item_ids or ():
                found[item_id] = score
        return found

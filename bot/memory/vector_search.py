"""What keeps a dense search over many rows cheap: `RowSum` and `SignCodes` (used by `VectorIndex`).

A search scores an item by how far its cosine with the message stands above the typical item's,
against the best item's: (cosine − mean) / (best cosine − mean) (the z-score of `VectorIndex.relevance`,
whose spread cancels out). Over a large memory the exact pass that computes every cosine for that is
most of a search. Above `EXACT_SEARCH_MAX_ROWS` rows two things replace it:

- the mean of the cosines over all rows is the query's product with the rows' sum, kept as rows
  are stored (`RowSum`): the same figure without the pass;
- only a short list is scored exactly: the rows whose sign bits (of the row minus the rows' mean,
  which takes out the direction every e5 vector shares) differ least from the query's (`SignCodes`:
  48 bytes a row at 384 dimensions, compared 64 bits at a time). The exact int8 cosines of that list
  then decide; a row outside it is missed only if it was far down the sign ranking (what the short
  list keeps: `bench/vector_prefilter.py`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Up to this many rows every cosine is computed (a short pass): the short list pays off above it.
EXACT_SEARCH_MAX_ROWS = 20_000
# The short list scored exactly: this share of the rows, and at least `SHORTLIST_MIN_FACTOR` times the
# rows a search wants.
SHORTLIST_SHARE = 0.05
SHORTLIST_MIN_FACTOR = 8
# Rows dequantised at a time to sum or code them (1.5 MB of float32: stays in the CPU cache).
CHUNK_ROWS = 1024


def dequantized(rows: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Stored rows as the vectors they stand for (what the cosines are computed from)."""
    values = rows.astype(np.float32)
    values *= scales[:, None]
    return values


class RowSum:
    """The sum of the stored rows (float64): the mean of a query's cosines with every row is
    query·sum / count, without computing them."""

    def __init__(self, dimensions: int) -> None:
        self.count = 0
        self._sum = np.zeros(dimensions, dtype=np.float64)

    def add(self, rows: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], sign: int = 1) -> None:
        """Count rows in (`sign` 1), or out (-1: a row about to be overwritten)."""
        for start in range(0, len(rows), CHUNK_ROWS):
            values = dequantized(rows[start : start + CHUNK_ROWS], scales[start : start + CHUNK_ROWS])
            self._sum += sign * values.sum(axis=0, dtype=np.float64)
        self.count += sign * len(rows)

    def mean_row(self) -> npt.NDArray[np.float32]:
        return (self._sum / max(self.count, 1)).astype(np.float32)

    def mean_cosine(self, query: npt.NDArray[np.float32]) -> float:
        return float(query.astype(np.float64) @ self._sum) / max(self.count, 1)


class SignCodes:
    """One bit per dimension and row: whether the row lies above the centre on that dimension.

    The centre is the rows' mean when the codes were built; rows stored later are coded against the
    same centre (it only has to take out the direction all rows share, not be the exact mean). Kept
    word by word (64 dimensions of every row in one contiguous array), so a search runs a few passes
    over long arrays rather than a reduction along short rows, which is several times slower.
    """

    def __init__(self, center: npt.NDArray[np.float32], capacity: int) -> None:
        self._center = center
        self._words = (len(center) + 63) // 64
        self._codes = np.zeros((self._words, capacity), dtype=np.uint64)

    def _pack(self, values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
        """The codes of `values` (one row each), as (words, rows)."""
        bits = np.packbits(values > self._center, axis=1)
        padded = np.zeros((len(values), self._words * 8), dtype=np.uint8)
        padded[:, : bits.shape[1]] = bits
        return padded.view(np.uint64).T

    def grow(self, capacity: int) -> None:
        if capacity > self._codes.shape[1]:
            grown = np.zeros((self._words, capacity), dtype=np.uint64)
            grown[:, : self._codes.shape[1]] = self._codes
            self._codes = grown

    def set(self, targets: npt.NDArray[np.intp], rows: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> None:
        """Code `rows` (with their `scales`) as rows `targets`."""
        for start in range(0, len(targets), CHUNK_ROWS):
            end = start + CHUNK_ROWS
            self._codes[:, targets[start:end]] = self._pack(dequantized(rows[start:end], scales[start:end]))

    def shortlist(self, query: npt.NDArray[np.float32], used: int, size: int) -> npt.NDArray[np.intp]:
        """At least `size` rows among the first `used`, those whose codes differ least from the query's (all
        rows at the cut-off distance included), in row order."""
        if used <= size:
            return np.arange(used)
        # The query's code, without its part along the centre: on the LoCoMo vectors it keeps a little
        # more of the exact top rows than coding the query like a row.
        center = self._center
        level = query - center * (float(query @ center) / max(float(center @ center), 1e-12)) + center
        code = self._pack(level[None, :])[:, 0]
        distances = np.zeros(used, dtype=np.uint16)
        differing = np.empty(used, dtype=np.uint64)
        for word in range(self._words):
            np.bitwise_xor(self._codes[word, :used], code[word], out=differing)
            distances += np.bitwise_count(differing)
        # The cut-off: the smallest distance within which `size` rows lie, the `size`-th smallest distance (a
        # partition, not a sort).
        cutoff = int(np.partition(distances, size - 1)[size - 1])
        return np.flatnonzero(distances <= cutoff)

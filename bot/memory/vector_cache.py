"""`VectorCache`: the items' vectors on disk, so a restart embeds nothing it embedded before.

Each vector is keyed by the embedder and a hash of the text it was made from (`text_key`), and kept in
`index/vectors.sqlite3` beside the item files (as float16): a hand edit re-embeds only the lines it
changed. Its statements are `bot.memory.index_sql`'s.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bot.memory import index_sql
from bot.memory.embeddings import QuantizedBatch, quantize

log = logging.getLogger(__name__)

LOAD_BATCH_ROWS = 4096
CACHE_FILE_NAME = "vectors.sqlite3"


class VectorCache:
    """Vectors on disk, by embedder and text key (SQLite from the standard library: atomic, incremental).

    A cache that cannot be opened or read is renamed aside and started afresh: it holds nothing that
    cannot be computed again. Calls block: run them in a thread.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / CACHE_FILE_NAME
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._connection = self._open()
            except sqlite3.DatabaseError as error:
                aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
                log.warning("[Memory] Vector cache %s unreadable (%s); moved to %s", self.path, error, aside.name)
                self.path.rename(aside)
                self._connection = self._open()
        return self._connection

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            index_sql.open_vector_cache(connection)
        except sqlite3.DatabaseError:
            connection.close()
            raise
        return connection

    def load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        """The stored vectors of `keys` (those not stored are left out)."""
        with self._lock:
            rows = index_sql.vectors_of(self._connect(), embedder)
            return {key: np.frombuffer(blob, dtype=np.float16) for key, blob in rows if key in keys}

    def load_quantized(self, embedder: str, keys: set[str]) -> list[QuantizedBatch]:
        """The stored vectors of `keys`, as `quantize` makes them, a batch of rows at a time.

        A restart reads the whole cache: batches of contiguous arrays, not one small array per vector,
        so the memory it passes through is a few large blocks the allocator gives back.
        """
        batches: list[QuantizedBatch] = []
        with self._lock:
            cursor = index_sql.vectors_of(self._connect(), embedder)
            while rows := cursor.fetchmany(LOAD_BATCH_ROWS):
                found = [(key, blob) for key, blob in rows if key in keys]
                if not found:
                    continue
                # Vectors of one embedder all have its dimensions: one buffer, one reshape.
                halves = np.frombuffer(b"".join(blob for _, blob in found), dtype=np.float16)
                quantized, scales = quantize(halves.reshape(len(found), -1))
                batches.append(([key for key, _ in found], quantized, scales))
        return batches

    def store(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        with self._lock:
            index_sql.store_vectors(
                self._connect(), embedder, [(key, vector.tobytes()) for key, vector in vectors.items()]
            )

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

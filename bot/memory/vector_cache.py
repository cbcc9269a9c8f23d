"""Where the items' vectors are kept, so that a vector is made once: the `VectorStorage` interface, and
`VectorCache`, its file beside a scope's items.

Each vector is keyed by the embedder and a hash of the text it was made from (`text_key`): a hand edit
re-embeds only the lines it changed. `VectorCache` keeps them in `index/vectors.sqlite3` beside the item
files (as float16; its statements are `bot.memory.index_sql`'s); with `BOT_DATABASE_URL` every process
shares them in PostgreSQL (`postgres_items.VectorRows`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bot.memory import index_sql
from bot.memory.embeddings import QuantizedBatch, quantize

log = logging.getLogger(__name__)

LOAD_BATCH_ROWS = 4096
CACHE_FILE_NAME = "vectors.sqlite3"
# Keys asked for in one statement.
KEYS_PER_QUERY = 500


class VectorStorage(Protocol):
    """The stored vectors, by embedder and text key. Failures raise `OSError` or `sqlite3.DatabaseError`."""

    @property
    def where(self) -> str:
        """Where they are kept, for the log."""
        ...

    async def load_quantized(self, embedder: str, keys: set[str]) -> list[QuantizedBatch]:
        """The stored vectors of `keys`, as `quantize` makes them, a batch of rows at a time."""
        ...

    async def load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        """The stored vectors of `keys` (those not stored are left out)."""
        ...

    async def store(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None: ...

    async def close(self) -> None: ...


def quantized_batches(rows: Iterator[tuple[list[str], npt.NDArray[np.floating]]]) -> list[QuantizedBatch]:
    """Batches of vectors (their keys, and a matrix of their rows) as `quantize` makes them.

    A restart reads every stored vector: batches of contiguous arrays, not one small array per vector,
    so the memory it passes through is a few large blocks the allocator gives back.
    """
    batches: list[QuantizedBatch] = []
    for keys, matrix in rows:
        quantized, scales = quantize(matrix)
        batches.append((keys, quantized, scales))
    return batches


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

    @property
    def where(self) -> str:
        return str(self.path)

    async def load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        return await asyncio.to_thread(self._load, embedder, keys)

    def _load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        wanted = list(keys)
        found: dict[str, npt.NDArray[np.float16]] = {}
        with self._lock:
            connection = self._connect()
            for start in range(0, len(wanted), KEYS_PER_QUERY):
                rows = index_sql.vectors_with_keys(connection, embedder, wanted[start : start + KEYS_PER_QUERY])
                found.update((key, np.frombuffer(blob, dtype=np.float16)) for key, blob in rows)
        return found

    async def load_quantized(self, embedder: str, keys: set[str]) -> list[QuantizedBatch]:
        """The stored vectors of `keys`, as `quantize` makes them, a batch of rows at a time (a restart
        reads the whole cache)."""
        return await asyncio.to_thread(self._load_quantized, embedder, keys)

    def _load_quantized(self, embedder: str, keys: set[str]) -> list[QuantizedBatch]:
        with self._lock:
            cursor = index_sql.vectors_of(self._connect(), embedder)

            def batches() -> Iterator[tuple[list[str], npt.NDArray[np.float16]]]:
                while rows := cursor.fetchmany(LOAD_BATCH_ROWS):
                    found = [(key, blob) for key, blob in rows if key in keys]
                    if not found:
                        continue
                    # Vectors of one embedder all have its dimensions: one buffer, one reshape.
                    halves = np.frombuffer(b"".join(blob for _, blob in found), dtype=np.float16)
                    yield [key for key, _ in found], halves.reshape(len(found), -1)

            return quantized_batches(batches())

    async def store(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        await asyncio.to_thread(self.store_sync, embedder, vectors)

    def store_sync(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        """`store`, from a thread that may block (the benchmarks fill a cache this way)."""
        with self._lock:
            index_sql.store_vectors(
                self._connect(), embedder, [(key, vector.tobytes()) for key, vector in vectors.items()]
            )

    def everything_sync(self) -> Iterator[tuple[str, dict[str, npt.NDArray[np.float16]]]]:
        """Every stored vector, a batch of one embedder's at a time (`bot migrate` copies them)."""
        with self._lock:
            connection = self._connect()
            for embedder in index_sql.vector_embedders(connection):
                cursor = index_sql.vectors_of(connection, embedder)
                while rows := cursor.fetchmany(LOAD_BATCH_ROWS):
                    yield embedder, {key: np.frombuffer(blob, dtype=np.float16) for key, blob in rows}

    async def close(self) -> None:
        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

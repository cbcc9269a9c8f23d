"""Vector similarity for hybrid retrieval: the `Embedder`, the on-disk `VectorCache` and the `VectorIndex`.

By default the embedder is the bundled offline model (`local_embeddings`); `memory.embeddingsModel`
may name the endpoint's `/embeddings` model instead, or be null for lexical retrieval only.

Vectors are derived data. Each is keyed by the embedder and a hash of the text it was made from, and
kept in `index/vectors.sqlite3` beside the item files, so a restart embeds nothing it embedded before
and a hand edit re-embeds only the lines it changed. In memory they are float16 (768 bytes an item at
384 dimensions). Embedding runs in the background (`MemoryService`), never on the reply path except
for the message's own vector; an embedder failure costs one warning and a pause, never the reply.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem
from bot.llm.client import LlmClient
from bot.llm.errors import LlmError

log = logging.getLogger(__name__)

EMBED_BATCH_SIZE = 32
FAILURE_PAUSE_SECONDS = 300.0
# Similarities are computed this many rows at a time, so the float32 copy of the float16 matrix stays small.
SEARCH_CHUNK_ROWS = 16384
CACHE_FILE_NAME = "vectors.sqlite3"
# Below this many items a z-score says little: an item counts as similar from this cosine on (measured
# with the bundled e5 model: a paraphrase scores 0.85-0.87, unrelated short texts 0.71-0.83).
MIN_ITEMS_FOR_SPREAD = 32
SIMILAR_COSINE = 0.84

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into vectors: stored texts as passages, a message as a query."""

    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def embed_query(self, text: str) -> list[float]: ...


class EndpointEmbedder:
    """Embeddings from the OpenAI-compatible endpoint the chat model uses."""

    def __init__(self, llm: LlmClient, model: str) -> None:
        self._llm = llm
        self.name = model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await self._llm.embed(texts, self.name)

    async def embed_query(self, text: str) -> list[float]:
        [vector] = await self._llm.embed([text], self.name)
        return vector


def text_key(text: str) -> str:
    """What a vector is stored under: the exact text it was made from (a hash of it)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def unit(values: list[float] | npt.NDArray[np.floating]) -> Vector:
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


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
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS vectors (embedder TEXT NOT NULL, key TEXT NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (embedder, key)) WITHOUT ROWID"
        )
        connection.execute("PRAGMA quick_check").fetchone()
        return connection

    def load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        """The stored vectors of `keys` (those not stored are left out)."""
        with self._lock:
            rows = self._connect().execute("SELECT key, vector FROM vectors WHERE embedder = ?", (embedder,))
            return {key: np.frombuffer(blob, dtype=np.float16) for key, blob in rows if key in keys}

    def store(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        with self._lock:
            connection = self._connect()
            with connection:
                connection.execute("BEGIN")
                connection.executemany(
                    "INSERT OR REPLACE INTO vectors (embedder, key, vector) VALUES (?, ?, ?)",
                    [(embedder, key, vector.tobytes()) for key, vector in vectors.items()],
                )

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class VectorIndex:
    """Unit vectors of the active items' texts; cosine similarity against all of them at once."""

    def __init__(self) -> None:
        self._key_of: dict[str, str] = {}  # item id -> text key
        self._text_of: dict[str, str] = {}  # text key -> text
        self._vectors: dict[str, npt.NDArray[np.float16]] = {}  # text key -> vector
        self._matrix: npt.NDArray[np.float16] | None = None
        self._matrix_ids: list[str] = []
        # Text keys that may lack a vector (checked again by `pending`): keeps `has_pending` cheap.
        self._missing: set[str] = set()
        self._paused_until = 0.0
        self.embedder_name: str | None = None

    # -- following the store (ItemIndex) ------------------------------------------------------------

    def add(self, item: MemoryItem) -> None:
        self.remove(item.id)
        if item.active:
            key = text_key(item.content)
            self._key_of[item.id] = key
            self._text_of[key] = item.content
            if key not in self._vectors:
                self._missing.add(key)
            self._matrix = None

    def add_many(self, items: list[MemoryItem]) -> None:
        for item in items:
            self.add(item)

    def remove(self, item_id: str) -> None:
        if self._key_of.pop(item_id, None) is not None:
            self._matrix = None

    # -- filling ------------------------------------------------------------------------------------

    def use_embedder(self, name: str) -> None:
        """Vectors of another embedder are not comparable: switching drops them."""
        if self.embedder_name != name:
            self.embedder_name = name
            self._vectors.clear()
            self._missing = set(self._key_of.values())
            self._matrix = None

    def wanted_keys(self) -> set[str]:
        return set(self._key_of.values())

    @property
    def has_pending(self) -> bool:
        return bool(self._missing)

    def pending(self) -> list[tuple[str, str]]:
        """(text key, text) of every active item without a vector yet."""
        wanted = self.wanted_keys()
        self._missing = {key for key in self._missing if key in wanted and key not in self._vectors}
        return [(key, self._text_of[key]) for key in sorted(self._missing)]

    def put(self, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        if vectors:
            self._vectors.update(vectors)
            self._missing.difference_update(vectors)
            self._matrix = None

    @property
    def coverage(self) -> tuple[int, int]:
        """(items with a vector, active items)."""
        return sum(1 for key in self._key_of.values() if key in self._vectors), len(self._key_of)

    def paused(self) -> bool:
        return time.monotonic() < self._paused_until

    def pause_after_failure(self, embedder: str, error: Exception) -> None:
        self._paused_until = time.monotonic() + FAILURE_PAUSE_SECONDS
        log.warning(
            "[Memory] Embeddings from %s failed (%s); lexical retrieval only for %.0f s",
            embedder,
            error,
            FAILURE_PAUSE_SECONDS,
        )

    async def embed_query(self, embedder: Embedder, text: str) -> Vector | None:
        if self.paused():
            return None
        try:
            return unit(await embedder.embed_query(text))
        except (LlmError, ValueError, OSError) as error:
            self.pause_after_failure(embedder.name, error)
            return None

    # -- searching ----------------------------------------------------------------------------------

    def relevance(self, query: Vector, limit: int) -> dict[str, float]:
        """The `limit` items most similar to `query`, each scored 0..1 against the rest.

        A raw cosine means little on its own (every text is somewhat similar to every other), so the
        score is how far an item stands above the typical one: its z-score among all items, clipped
        at 0 and divided by the best one's.
        """
        if self._matrix is None:
            self._rebuild()
        matrix = self._matrix
        if matrix is None or not self._matrix_ids or matrix.shape[1] != query.shape[0]:
            return {}
        similarities = np.concatenate(
            [
                matrix[start : start + SEARCH_CHUNK_ROWS].astype(np.float32) @ query
                for start in range(0, matrix.shape[0], SEARCH_CHUNK_ROWS)
            ]
        )
        spread = float(similarities.std())
        if len(similarities) < MIN_ITEMS_FOR_SPREAD or spread <= 1e-6:
            # Too few items to know what "typical" is: an absolute similarity decides instead.
            return {
                item_id: float(value)
                for item_id, value in zip(self._matrix_ids, similarities, strict=True)
                if value >= SIMILAR_COSINE
            }
        z = (similarities - float(similarities.mean())) / spread
        best_z = float(z.max())
        if best_z <= 0:
            return {}
        if len(z) > limit:
            best = np.argpartition(-z, limit)[:limit]
        else:
            best = np.arange(len(z))
        return {self._matrix_ids[i]: float(z[i]) / best_z for i in best if z[i] > 0}

    def similarity(self, first_id: str, second_id: str) -> float | None:
        """Cosine similarity of two items' vectors, when both have one."""
        first = self._vectors.get(self._key_of.get(first_id, ""))
        second = self._vectors.get(self._key_of.get(second_id, ""))
        if first is None or second is None:
            return None
        return float(first.astype(np.float32) @ second.astype(np.float32))

    def _rebuild(self) -> None:
        ids = [item_id for item_id, key in self._key_of.items() if key in self._vectors]
        self._matrix_ids = ids
        self._matrix = np.stack([self._vectors[self._key_of[item_id]] for item_id in ids]) if ids else None


def as_float16(vectors: list[list[float]]) -> list[npt.NDArray[np.float16]]:
    return [unit(vector).astype(np.float16) for vector in vectors]

"""Vector similarity for hybrid retrieval: an `Embedder` and the `VectorIndex` of item embeddings.

Embeddings come from the endpoint's `/embeddings` (`memory.embeddingsModel`); without one,
retrieval is lexical only. Vectors are derived data: kept in memory, keyed by content fingerprint
(an item whose content did not change is never embedded twice), and filled in batches as items
arrive. An endpoint failure costs one warning and a pause, never the reply.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem
from bot.llm.client import LlmClient
from bot.llm.errors import LlmError

log = logging.getLogger(__name__)

EMBED_BATCH_SIZE = 64
# Items embedded at most after each reply, so a large memory is filled in over several turns.
EMBED_PER_QUERY_LIMIT = 256
FAILURE_PAUSE_SECONDS = 300.0

Vector = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into vectors (one per text, in order)."""

    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class EndpointEmbedder:
    """Embeddings from the OpenAI-compatible endpoint the chat model uses."""

    def __init__(self, llm: LlmClient, model: str) -> None:
        self._llm = llm
        self.name = model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await self._llm.embed(texts, self.name)


def _unit(values: list[float]) -> Vector:
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class VectorIndex:
    """Unit vectors of the active items' contents; cosine search over all of them at once."""

    def __init__(self) -> None:
        self._fingerprint_of: dict[str, str] = {}
        self._text_of: dict[str, str] = {}
        self._vectors: dict[str, Vector] = {}  # by fingerprint
        self._matrix: Vector | None = None
        self._matrix_ids: list[str] = []
        self._paused_until = 0.0

    def add(self, item: MemoryItem) -> None:
        self.remove(item.id)
        if item.active:
            self._fingerprint_of[item.id] = item.fingerprint
            self._text_of[item.fingerprint] = item.content
            self._matrix = None

    def add_many(self, items: list[MemoryItem]) -> None:
        for item in items:
            self.add(item)

    def remove(self, item_id: str) -> None:
        if self._fingerprint_of.pop(item_id, None) is not None:
            self._matrix = None

    def missing(self) -> list[str]:
        """Fingerprints of active items without a vector yet."""
        return list(dict.fromkeys(fp for fp in self._fingerprint_of.values() if fp not in self._vectors))

    def pending(self, limit: int = EMBED_PER_QUERY_LIMIT) -> list[tuple[str, str]]:
        """Up to `limit` (fingerprint, text) pairs of active items without a vector yet."""
        return [(fingerprint, self._text_of[fingerprint]) for fingerprint in self.missing()[:limit]]

    def put(self, fingerprints: list[str], vectors: list[list[float]]) -> None:
        for fingerprint, vector in zip(fingerprints, vectors, strict=True):
            self._vectors[fingerprint] = _unit(vector)
        self._matrix = None

    async def embed_texts(self, embedder: Embedder, texts: list[str]) -> list[list[float]] | None:
        """Vectors for `texts` in batches; None (after one warning) when the embedder is failing."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH_SIZE):
            batch = await self._embed(embedder, texts[start : start + EMBED_BATCH_SIZE])
            if batch is None:
                return None
            vectors += batch
        return vectors

    async def fill(self, embedder: Embedder, limit: int = EMBED_PER_QUERY_LIMIT) -> bool:
        """Embed up to `limit` items that have no vector; False when the endpoint is failing."""
        todo = self.pending(limit)
        vectors = await self.embed_texts(embedder, [text for _, text in todo])
        if vectors is None:
            return False
        self.put([fingerprint for fingerprint, _ in todo], vectors)
        return True

    async def embed_query(self, embedder: Embedder, text: str) -> Vector | None:
        if time.monotonic() < self._paused_until:
            return None
        vectors = await self._embed(embedder, [text])
        return None if vectors is None else _unit(vectors[0])

    async def _embed(self, embedder: Embedder, texts: list[str]) -> list[list[float]] | None:
        if time.monotonic() < self._paused_until:
            return None
        try:
            return await embedder.embed(texts)
        except (LlmError, ValueError) as error:
            self._paused_until = time.monotonic() + FAILURE_PAUSE_SECONDS
            log.warning(
                "[Memory] Embeddings from %s failed (%s); lexical retrieval only for %.0f s",
                embedder.name,
                error,
                FAILURE_PAUSE_SECONDS,
            )
            return None

    def search(self, query: Vector, limit: int) -> dict[str, float]:
        """The `limit` most similar items (cosine similarity) among those with vectors."""
        if self._matrix is None:
            self._rebuild()
        if self._matrix is None or not self._matrix_ids or self._matrix.shape[1] != query.shape[0]:
            return {}
        similarities = self._matrix @ query
        if len(similarities) > limit:
            best = np.argpartition(-similarities, limit)[:limit]
        else:
            best = np.arange(len(similarities))
        return {self._matrix_ids[i]: float(similarities[i]) for i in best}

    def _rebuild(self) -> None:
        ids = [item_id for item_id, fp in self._fingerprint_of.items() if fp in self._vectors]
        self._matrix_ids = ids
        if not ids:
            self._matrix = None
            return
        dimensions = {self._vectors[self._fingerprint_of[item_id]].shape[0] for item_id in ids}
        if len(dimensions) > 1:  # the model changed: keep only vectors of the newest size
            self._vectors.clear()
            self._matrix = None
            self._matrix_ids = []
            return
        self._matrix = np.stack([self._vectors[self._fingerprint_of[item_id]] for item_id in ids])

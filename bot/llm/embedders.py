"""`Embedder`: texts to vectors, for memory retrieval and the knowledge graph alike.

Two kinds: the bundled offline model (`local_embeddings.LocalEmbedder`, the default, chosen with the
name `"local"`) and the endpoint's `/embeddings` (`EndpointEmbedder`, any other model name).
"""

from __future__ import annotations

from typing import Protocol

from bot.llm.client import LlmClient
from bot.llm.local_embeddings import LOCAL_MODEL, LocalEmbedder


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


class Embedders:
    """The embedder for a configured name; one local model per process, shared by every user of it."""

    def __init__(self, llm: LlmClient) -> None:
        self._llm = llm
        self._local: LocalEmbedder | None = None

    async def close(self) -> None:
        """End the local model's worker threads (it starts them again if asked afterwards)."""
        if self._local is not None:
            self._local.close()

    def get(self, name: str | None) -> Embedder | None:
        if not name:
            return None
        if name == LOCAL_MODEL:
            if self._local is None:
                self._local = LocalEmbedder()
            return self._local
        return EndpointEmbedder(self._llm, name)

"""`RagBackend`: what the bot needs from a LightRAG, whichever way it runs (embedded or a server)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.rag.documents import RagDocument

QueryMode = Literal["naive", "local", "global", "hybrid", "mix"]
# How many relations away from an entity its neighbourhood reaches.
NEIGHBOURHOOD_DEPTH = 2


class RagBackendError(Exception):
    """The backend refused or failed an operation; the message says what, in plain words."""


@dataclass(frozen=True)
class RagQuery:
    """One retrieval: the text, the mode, and the limits LightRAG applies while building context."""

    text: str
    mode: QueryMode
    top_k: int
    chunk_top_k: int
    max_tokens: int


@dataclass(frozen=True)
class RagSnippet:
    """One piece of retrieved context: an entity, a relation or a chunk of a past exchange, and the names of
    the documents it was drawn from (where the backend says them)."""

    kind: Literal["entity", "relation", "chunk", "text"]
    text: str
    documents: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphEntity:
    """An entity of the knowledge graph as the console draws it: its descriptions (LightRAG keeps one per
    extraction), the text it was drawn from where the backend can read it (`sources`), and the names of the
    documents it was drawn from (`documents`), by which the bot's journal finds their text otherwise."""

    name: str
    type: str
    descriptions: tuple[str, ...]
    sources: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphRelation:
    """A relation between two entities, with what it says and its keywords."""

    source: str
    target: str
    description: str
    keywords: str


@dataclass(frozen=True)
class GraphView:
    """Entities of a knowledge graph and the relations between them: the most connected of the whole graph, or
    those nearest one entity (its neighbourhood). `total` counts every entity of the whole graph, drawn or not;
    of a neighbourhood, those drawn. `truncated`: more entities lie beyond those drawn (of a neighbourhood, within
    its reach)."""

    entities: tuple[GraphEntity, ...]
    relations: tuple[GraphRelation, ...]
    total: int
    truncated: bool = False


class RagBackend(Protocol):
    """A LightRAG store. Every call names the LightRAG workspace it acts on (one per chat with
    `memory.scope: chat`). With `keeps_workspaces_apart`, nothing crosses between workspaces; without it
    (a LightRAG server, which keeps one graph whatever workspace a request names), a query answers from
    every workspace's documents, and the caller keeps those of its own."""

    name: str
    keeps_workspaces_apart: bool

    async def insert(self, workspace: str, documents: list[RagDocument]) -> dict[str, str]:
        """Index `documents` and wait until they are processed. Returns each document's id in the
        backend (its own id when the backend keeps ours). Raises `RagBackendError` on failure."""
        ...

    async def query(self, workspace: str, query: RagQuery) -> list[RagSnippet]:
        """The context LightRAG retrieves for `query` (no answer is generated)."""
        ...

    async def delete(self, workspace: str, backend_ids: list[str]) -> None:
        """Remove documents and everything extracted only from them; unknown ids are not an error."""
        ...

    async def delete_named(self, workspace: str, names: list[str], deleted: Collection[str] = ()) -> list[str]:
        """Remove the documents sent under these names whose backend ids the bot never learned (an insert
        whose wait ran out may have finished in the backend), but those whose id is in `deleted`; a name the
        backend does not hold is skipped. Returns the backend ids deleted."""
        ...

    async def graph(self, workspace: str, max_entities: int, around: str | None = None) -> GraphView:
        """The `max_entities` most connected entities of `workspace`'s graph and the relations between them; with
        `around`, that entity and the `max_entities` nearest it within `NEIGHBOURHOOD_DEPTH` relations (an empty
        view when the graph does not hold it). Raises `RagBackendError` when the graph cannot be read (a server or
        a database that does not answer)."""
        ...

    async def search_entities(self, workspace: str, query: str, limit: int) -> list[str]:
        """The names of `workspace`'s entities that contain `query` (case aside), at most `limit`, the best first
        (LightRAG's order: the name itself, then names starting with it, then the shortest). Raises
        `RagBackendError` when the graph cannot be read."""
        ...

    async def open(self, workspace: str) -> None:
        """Get `workspace` ready to answer (load what a first query would load); nothing when remote."""
        ...

    async def close(self) -> None: ...

"""The knowledge graph page: the entities and relations LightRAG extracted, drawn by graph.js (zoom, a node's
descriptions and sources, a search of every entity's name whose choice draws that entity's neighbourhood),
and the documents indexed, each of which can be forgotten.

The graph is the backend's to read (LightRAG's storages in the process, files or PostgreSQL alike, or a
LightRAG server's API), every chat's graph drawn as one; a backend that cannot answer is said so on the page."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.console.html import esc, form, hidden, table
from bot.console.server import Visit, back_to, json_response, notes_of
from bot.rag.backend import NEIGHBOURHOOD_DEPTH, GraphView, RagBackendError
from bot.rag.documents import BATCH_SEPARATOR, exchanges_in
from bot.rag.service import RagService

log = logging.getLogger(__name__)

# The most connected entities drawn (a force layout of more is slow in the browser); `total` says how many there are.
MAX_NODES = 400
# A source shown with a node is cut to this.
SOURCE_CHARS = 500
# The names a search answers with, the best first.
SEARCH_RESULTS = 20
# The longest search or entity name taken: LightRAG cuts the names it extracts to this many characters.
MAX_NAME_CHARS = 256


@dataclass(frozen=True)
class GraphPage:
    rag: RagService

    async def show(self, visit: Visit) -> web.StreamResponse:
        docs = await self.rag.store.live()
        rows = [
            [esc(doc.created_at[:16]), esc(doc.session_id), esc(doc.status),
             f'<span class="doc-text">{esc(doc.text[:160])}</span>',
             form("graph/forget", hidden("doc", doc.id), visit.csrf, "Forget", css="inline danger")]
            for doc in reversed(docs)
        ]  # fmt: skip
        body = (
            notes_of(visit.request) + '<div class="graph-tools">'
            '<input type="search" id="graph-search" placeholder="Find an entity" aria-label="find an entity" '
            f'maxlength="{MAX_NAME_CHARS}" autocomplete="off" aria-controls="graph-found">'
            '<button type="button" id="zoom-in" aria-label="zoom in">+</button>'
            '<button type="button" id="zoom-out" aria-label="zoom out">−</button>'
            '<button type="button" id="graph-whole" class="whole" hidden>Whole graph</button></div>'
            '<ul id="graph-found" class="graph-found" aria-label="entities found"></ul>'
            '<p id="graph-drawn" class="graph-drawn" role="status"></p>'
            '<div class="graph-area"><svg id="graph" role="img" aria-label="knowledge graph"></svg>'
            '<aside id="graph-node"><p>Select a node to see its descriptions and sources.</p></aside></div>'
            f"<h2>Documents indexed · {len(docs)}</h2>"
            + (
                table(["when", "chat", "state", "text", ""], rows, css="documents")
                if rows
                else "<p>No documents yet.</p>"
            )
        )
        return visit.page("Knowledge graph", body, scripts=("graph.js",))

    async def data(self, visit: Visit) -> web.StreamResponse:
        """The graph drawn: every chat's most connected entities, or with `?entity=` that entity's neighbourhood."""
        around = visit.request.query.get("entity")
        unread: dict[str, Any] = {"nodes": [], "edges": [], "total": 0}
        if around is not None and not around.strip():
            return json_response({**unread, "error": "Choose an entity to draw: its name is empty."}, 400)
        if around is not None and len(around) > MAX_NAME_CHARS:
            refused = f"No entity's name is longer than {MAX_NAME_CHARS} characters: choose one the search found."
            return json_response({**unread, "error": refused}, 400)
        try:
            view = await self.rag.graph(MAX_NODES, around)
        except RagBackendError as error:
            return json_response({**unread, "error": _unanswered("read", error)}, 503)
        if around is not None and not view.entities:
            missing = f"The knowledge graph holds no entity named “{around}” (forgotten since, or never extracted)."
            return json_response({**unread, "entity": around, "error": missing}, 404)
        drawn = graph_json(view)
        return json_response(drawn if around is None else {**drawn, "entity": around, "depth": NEIGHBOURHOOD_DEPTH})

    async def search(self, visit: Visit) -> web.StreamResponse:
        """The names of the entities of every chat's graph that contain `?q=` (case aside), the best first."""
        query = visit.request.query.get("q", "").strip()
        if not query:
            wanted = "Type part of an entity's name to find it."
            return json_response({"query": query, "names": [], "error": wanted}, 400)
        if len(query) > MAX_NAME_CHARS:
            refused = f"A search is at most {MAX_NAME_CHARS} characters: no entity's name is longer."
            return json_response({"query": query[:MAX_NAME_CHARS], "names": [], "error": refused}, 400)
        try:
            names = await self.rag.search_entities(query, SEARCH_RESULTS)
        except RagBackendError as error:
            return json_response({"query": query, "names": [], "error": _unanswered("searched", error)}, 503)
        return json_response({"query": query, "names": names})

    async def forget(self, visit: Visit) -> web.StreamResponse:
        doc_id = visit.form.get("doc", "")
        if await self.rag.store.get(doc_id) is None:
            back_to("graph", error=f"No document {doc_id}.")
        try:
            forgotten = await self.rag.forget_documents([doc_id])
        except RagBackendError as error:
            # Nothing is marked forgotten until the graph has deleted it: the document stays listed, to try again.
            log.warning("[Console] The graph could not forget %s: %s", doc_id, error)
            back_to("graph", error=f"The graph could not delete {doc_id} ({error}); it is still indexed: try again.")
        back_to("graph", note=f"Forgotten: {len(forgotten)} document(s) and what the graph drew from them only.")


def _unanswered(done: str, error: RagBackendError) -> str:
    """What the page says, and the log, of a backend that could not answer."""
    reason = str(error) or f"no answer ({type(error).__name__})"
    log.warning("[Console] The knowledge graph could not be %s: %s", done, reason)
    return f"The knowledge graph could not be {done}: {reason}"


def graph_json(view: GraphView) -> dict[str, Any]:
    """What graph.js draws: the nodes with their type, descriptions and sources, the edges, `total` and whether
    more lie beyond what is drawn (`truncated`)."""
    return {
        "nodes": [
            {"id": entity.name, "type": entity.type, "descriptions": list(entity.descriptions),
             "sources": sources_of(entity.name, entity.sources)}
            for entity in view.entities
        ],
        "edges": [
            {"source": relation.source, "target": relation.target, "description": relation.description,
             "keywords": relation.keywords}
            for relation in view.relations
        ],
        "total": view.total,
        "truncated": view.truncated,
    }  # fmt: skip


def sources_of(name: str, sources: tuple[str, ...]) -> list[str]:
    """What a node shows of the text it was drawn from: of each source (a chunk, or an exchange, of a batch of
    exchanges), the exchanges that name the entity; every source whole when none does (a name the model
    wrote otherwise than the text); each cut to `SOURCE_CHARS`."""
    naming = [
        BATCH_SEPARATOR.join(exchange.strip() for exchange in exchanges if name.casefold() in exchange.casefold())
        for exchanges in (exchanges_in(source.strip()) for source in sources)
    ]
    shown = [text for text in naming if text] or [source.strip() for source in sources]
    return list(dict.fromkeys(_cut(text) for text in shown))


def _cut(text: str) -> str:
    return text if len(text) <= SOURCE_CHARS else text[: SOURCE_CHARS - 1].rstrip() + "…"

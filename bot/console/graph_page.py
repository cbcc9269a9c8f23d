"""The knowledge graph page: the entities and relations LightRAG extracted, drawn by graph.js (search,
zoom, a node's descriptions and sources), and the documents indexed, each of which can be forgotten.

The graph is the backend's to read (LightRAG's storages in the process, files or PostgreSQL alike, or a
LightRAG server's API), every chat's graph drawn as one; a backend that cannot answer is said so on the page."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bot.console.html import esc, form, hidden, table
from bot.console.server import SECURITY_HEADERS, Visit, back_to, notes_of
from bot.rag.backend import GraphView, RagBackendError
from bot.rag.documents import BATCH_SEPARATOR, exchanges_in
from bot.rag.service import RagService

log = logging.getLogger(__name__)

# The most connected entities drawn (a force layout of more is slow in the browser); `total` says how many there are.
MAX_NODES = 400
# A source shown with a node is cut to this.
SOURCE_CHARS = 500


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
            '<input type="search" id="graph-search" placeholder="Find an entity" aria-label="find an entity">'
            '<button type="button" id="zoom-in">+</button><button type="button" id="zoom-out">−</button></div>'
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
        try:
            view = await self.rag.graph(MAX_NODES)
        except RagBackendError as error:
            reason = str(error) or f"no answer ({type(error).__name__})"
            log.warning("[Console] The knowledge graph could not be read: %s", reason)
            unread = {"nodes": [], "edges": [], "total": 0, "error": f"The knowledge graph could not be read: {reason}"}
            return web.json_response(unread, status=503, headers=SECURITY_HEADERS)
        return web.json_response(graph_json(view), headers=SECURITY_HEADERS)

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


def graph_json(view: GraphView) -> dict[str, Any]:
    """What graph.js draws: the nodes with their type, descriptions and sources, the edges, and `total`."""
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

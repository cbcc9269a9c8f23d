"""The knowledge graph page: the entities and relations LightRAG extracted, drawn by graph.js (search,
zoom, a node's descriptions and sources), and the documents indexed, each of which can be forgotten.

The graph is read from the GraphML files LightRAG keeps in the workspace's `rag/` folder (its default
file storage); with the PostgreSQL storage there is none to draw, and the page says so."""

from __future__ import annotations

import asyncio
import json
import logging
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.console.html import esc, form, hidden, table
from bot.console.server import SECURITY_HEADERS, Visit, back_to, notes_of
from bot.rag.backend import RagBackendError
from bot.rag.service import RagService

log = logging.getLogger(__name__)

GRAPH_FILE = "graph_chunk_entity_relation.graphml"
CHUNKS_FILE = "kv_store_text_chunks.json"
# LightRAG joins the several values of one attribute (descriptions, sources) with this.
SEPARATOR = "<SEP>"
# The most connected entities drawn; a larger graph is reached by search.
MAX_NODES = 400
_NS = "{http://graphml.graphdrawing.org/xmlns}"


@dataclass(frozen=True)
class GraphPage:
    rag: RagService
    rag_dir: Path

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
        graph = await asyncio.to_thread(read_graph, self.rag_dir)
        return web.json_response(graph, headers=SECURITY_HEADERS)

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


def read_graph(rag_dir: Path) -> dict[str, Any]:
    """Every graph file's entities (the most connected `MAX_NODES`) and the relations between them."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    for path in sorted(rag_dir.rglob(GRAPH_FILE)):
        chunks = _chunks(path.parent / CHUNKS_FILE)
        try:
            root = ElementTree.parse(path).getroot()
        except (OSError, ElementTree.ParseError) as error:
            log.warning("[Console] Could not read the graph %s: %s", path, error)
            continue
        keys = {key.get("id"): key.get("attr.name") for key in root.iter(f"{_NS}key")}
        for node in root.iter(f"{_NS}node"):
            values = _values(node, keys)
            nodes[node.get("id", "")] = {
                "id": node.get("id", ""),
                "type": values.get("entity_type", ""),
                "descriptions": _split(values.get("description", "")),
                "sources": [chunks.get(source, source) for source in _split(values.get("source_id", ""))],
            }
        for edge in root.iter(f"{_NS}edge"):
            values = _values(edge, keys)
            edges.append(
                {"source": edge.get("source", ""), "target": edge.get("target", ""),
                 "description": values.get("description", ""), "keywords": values.get("keywords", "")}
            )  # fmt: skip
    degree: dict[str, int] = dict.fromkeys(nodes, 0)
    for relation in edges:
        for end in (relation["source"], relation["target"]):
            if end in degree:
                degree[end] += 1
    kept = set(sorted(degree, key=lambda name: degree[name], reverse=True)[:MAX_NODES])
    return {
        "nodes": [node for name, node in nodes.items() if name in kept],
        "edges": [edge for edge in edges if edge["source"] in kept and edge["target"] in kept],
        "total": len(nodes),
    }


def _values(element: ElementTree.Element, keys: dict[str | None, str | None]) -> dict[str, str]:
    return {str(keys.get(data.get("key"))): data.text or "" for data in element.iter(f"{_NS}data")}


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(SEPARATOR) if part.strip()]


def _chunks(path: Path) -> dict[str, str]:
    """The text of each chunk, by id: a node's sources are chunks of the documents indexed."""
    try:
        stored = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict):
        return {}
    return {
        chunk_id: str(chunk.get("content", ""))[:300] for chunk_id, chunk in stored.items() if isinstance(chunk, dict)
    }

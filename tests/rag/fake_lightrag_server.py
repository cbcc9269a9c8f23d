"""A small fake of the LightRAG server's HTTP API on 127.0.0.1, for the `server` backend's tests.

It keeps documents per workspace (the `LIGHTRAG-WORKSPACE` header, for the tests to look at), names them
`doc-{md5 of the name}` as the real server does, answers `/query/data` (or, with `legacy=True`, only `/query`
with a context string in LightRAG's format, and no `/graph/label/search`) with the documents sharing a word with
the query, of every workspace (the real server keeps one graph whatever the header names), and checks
`X-API-Key`.

Duplicates are refused as LightRAG 1.5 refuses them: a name it holds already with HTTP 409, the same text
under a new name with a FAILED pointer record naming the original (older servers, `legacy=True`, answer
a name they hold with 200 `duplicated`). With `hold_processing`, new documents stay `processing` until
`finish_processing()`, as on a server slower than the bot's wait. As the real server, it refuses a deletion
as `busy` while its pipeline works (a document processing, a deletion running; and `busy_deletes` more
times), and takes one with `deletion_started`, deleting in the background (`delete_seconds`): meanwhile
`GET /documents/pipeline_status` says `busy`, and a new document is refused (409).

Its knowledge graph is extracted as `tests.rag.helpers.lightrag_responder` extracts it for the embedded
backend (each capitalised word an entity, related to the next), from the processed documents of every
workspace (the one graph of the real server), so a deleted document takes what only it supported;
`GET /graphs` (the most connected with `label=*`, else the label's neighbourhood breadth first),
`GET /graph/label/list` and `GET /graph/label/search` (ranked as LightRAG's graph storages rank) answer in
the real server's shapes, refusing what it refuses (422). With `graph_error`, `GET /graphs` and the search
fail as the server does when its storage fails (500).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.rag.helpers import names_in, sentence_with

SEPARATOR = "<SEP>"


@dataclass
class FakeLightRagServer:
    api_key: str | None = None
    legacy: bool = False
    hold_processing: bool = False
    busy_deletes: int = 0  # how many deletions are refused as `busy` first, as while the pipeline works
    # How long a deletion the server took runs in the background (its pipeline busy meanwhile).
    delete_seconds: float = 0.05
    graph_error: str | None = None  # `GET /graphs` answers 500 with this detail, as when the graph storage fails
    documents: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # The FAILED records of refused duplicates, per workspace: they point at a document and hold no text.
    pointers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    tracks: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    deleting: bool = False
    _runner: web.AppRunner | None = None
    _deletions: set[asyncio.Task[None]] = field(default_factory=set)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeLightRagServer:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/health", self._health)
        app.router.add_post("/documents/text", self._insert)
        app.router.add_get("/documents/track_status/{track_id}", self._track)
        app.router.add_post("/documents/paginated", self._paginated)
        app.router.add_delete("/documents/delete_document", self._delete)
        app.router.add_get("/documents/pipeline_status", self._pipeline_status)
        app.router.add_post("/query", self._query)
        app.router.add_get("/graphs", self._graphs)
        app.router.add_get("/graph/label/list", self._labels)
        if not self.legacy:
            app.router.add_post("/query/data", self._query_data)
            app.router.add_get("/graph/label/search", self._search_labels)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        for deletion in list(self._deletions):
            deletion.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        workspace = request.headers.get("LIGHTRAG-WORKSPACE", "")
        self.requests.append((request.method, request.path, workspace))
        if self.api_key and request.path != "/health" and request.headers.get("X-API-Key") != self.api_key:
            return web.json_response({"detail": "Invalid API Key"}, status=403)
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "healthy", "core_version": "fake"})

    def finish_processing(self) -> None:
        for workspace in self.documents.values():
            for record in workspace.values():
                record["status"] = "processed"

    async def _insert(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.deleting:
            detail = (
                "Pipeline is clearing or deleting documents. "
                "Wait for the running job to finish before submitting new work."
            )
            return web.json_response({"detail": detail}, status=409)
        name = request.headers.get("LIGHTRAG-WORKSPACE", "")
        workspace = self.documents.setdefault(name, {})
        file_path = body.get("file_source", "unknown_source")
        held = [record for record in workspace.values() if record["file_path"] == file_path]
        if held and self.legacy:
            return web.json_response({"status": "duplicated", "message": "exists", "track_id": ""})
        if held:
            detail = (
                f"Document storage already contains '{file_path}' (Status: {held[0]['status']}). "
                "Delete the existing record before re-inserting."
            )
            return web.json_response({"detail": detail}, status=409)
        track_id = f"insert_{uuid.uuid4().hex[:8]}"
        doc_id = "doc-" + hashlib.md5(file_path.encode()).hexdigest()
        same_text = [(held_id, r) for held_id, r in workspace.items() if r["text"] == body["text"]]
        if same_text:
            original_id, original = same_text[0]
            self.pointers.setdefault(name, {})["dup-" + uuid.uuid4().hex] = {
                "status": "failed",
                "file_path": file_path,
                "track_id": track_id,
                "error_msg": "Identical content already exists under another filename. "
                f"Original doc_id: {original_id}, Status: {original['status']}",
                "metadata": {
                    "is_duplicate": True,
                    "duplicate_kind": "content_hash",
                    "original_doc_id": original_id,
                    "original_track_id": original["track_id"],
                },
            }
        else:
            status = "processing" if self.hold_processing else "processed"
            workspace[doc_id] = {"text": body["text"], "file_path": file_path, "status": status, "track_id": track_id}
        return web.json_response({"status": "success", "message": "queued", "track_id": track_id})

    def _records(self, workspace: str) -> list[dict[str, Any]]:
        """Every record of a workspace as the API shows it (without the text)."""
        documents = self.documents.get(workspace, {}) | self.pointers.get(workspace, {})
        return [
            {"id": doc_id, **{key: value for key, value in record.items() if key != "text"}}
            for doc_id, record in documents.items()
        ]

    async def _track(self, request: web.Request) -> web.Response:
        track_id = request.match_info["track_id"]
        records = self._records(request.headers.get("LIGHTRAG-WORKSPACE", ""))
        documents = [record for record in records if record["track_id"] == track_id]
        return web.json_response({"track_id": track_id, "documents": documents, "total_count": len(documents)})

    async def _paginated(self, request: web.Request) -> web.Response:
        body = await request.json()
        page, size = int(body.get("page", 1)), int(body.get("page_size", 50))
        if not 10 <= size <= 200:
            return web.json_response({"detail": "page_size must be between 10 and 200"}, status=422)
        records = self._records(request.headers.get("LIGHTRAG-WORKSPACE", ""))
        records.sort(key=lambda record: str(record[body.get("sort_field", "id")]))
        if body.get("sort_direction") == "desc":
            records.reverse()
        shown = records[(page - 1) * size : page * size]
        pagination = {
            "page": page,
            "page_size": size,
            "total_count": len(records),
            "has_next": page * size < len(records),
        }
        return web.json_response({"documents": shown, "pagination": pagination})

    def busy(self) -> bool:
        """The pipeline works: a document is processing or a deletion runs."""
        processing = any(r["status"] == "processing" for docs in self.documents.values() for r in docs.values())
        return self.deleting or processing

    async def _pipeline_status(self, request: web.Request) -> web.Response:
        return web.json_response({"busy": self.busy(), "job_name": "Default Job", "latest_message": ""})

    async def _delete(self, request: web.Request) -> web.Response:
        body = await request.json()
        doc_ids = ", ".join(body["doc_ids"])
        if self.busy_deletes > 0 or self.busy():
            self.busy_deletes = max(0, self.busy_deletes - 1)
            message = "Pipeline is busy with another operation."
            return web.json_response({"status": "busy", "message": message, "doc_id": doc_ids})
        self.deleting = True
        deletion = asyncio.create_task(self._delete_later(request.headers.get("LIGHTRAG-WORKSPACE", ""), body))
        self._deletions.add(deletion)
        deletion.add_done_callback(self._deletions.discard)
        message = f"Document deletion for {len(body['doc_ids'])} documents has been initiated."
        return web.json_response({"status": "deletion_started", "message": message, "doc_id": doc_ids})

    async def _delete_later(self, name: str, body: dict[str, Any]) -> None:
        try:
            await asyncio.sleep(self.delete_seconds)
            for doc_id in body["doc_ids"]:
                self.deleted.append(doc_id)
                self.documents.get(name, {}).pop(doc_id, None)
                self.pointers.get(name, {}).pop(doc_id, None)
        finally:
            self.deleting = False

    def _matches(self, request: web.Request, query: str) -> list[dict[str, Any]]:
        """The processed documents sharing a word with `query`, of every workspace: the real server reads the
        one graph it keeps whatever `LIGHTRAG-WORKSPACE` names."""
        words = set(re.findall(r"\w{4,}", query.lower()))
        held = [d for workspace in self.documents.values() for d in workspace.values() if d["status"] == "processed"]
        return [d for d in held if words & set(re.findall(r"\w{4,}", d["text"].lower()))]

    async def _query_data(self, request: web.Request) -> web.Response:
        body = await request.json()
        chunks = [{"content": d["text"], "file_path": d["file_path"]} for d in self._matches(request, body["query"])]
        return web.json_response({"status": "success", "data": {"entities": [], "relationships": [], "chunks": chunks}})

    async def _query(self, request: web.Request) -> web.Response:
        body = await request.json()
        found = self._matches(request, body["query"])
        if not found:
            return web.json_response({"response": "Sorry, I'm not able to provide an answer.[no-context]"})
        lines = "\n".join(json.dumps({"reference_id": str(i), "content": d["text"]}) for i, d in enumerate(found))
        context = f"Document Chunks (...):\n\n```json\n{lines}\n```\n"
        return web.json_response({"response": context if body.get("only_need_context") else "an answer"})

    def _graph(self) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
        """The entities and relations of the processed documents of every workspace (the real server keeps one
        graph whatever `LIGHTRAG-WORKSPACE` names), each with its documents and chunks (one chunk a document),
        their properties joined with `<SEP>` as LightRAG joins them."""
        nodes: dict[str, dict[str, list[str]]] = {}
        edges: dict[tuple[str, str], dict[str, list[str]]] = {}
        for record in (record for workspace in self.documents.values() for record in workspace.values()):
            if record["status"] != "processed":
                continue
            text, chunk = record["text"], "chunk-" + hashlib.md5(record["text"].encode()).hexdigest()
            names = names_in(text)[:6]
            for name in names:
                node = nodes.setdefault(name, {"description": [], "source_id": [], "file_path": []})
                node["description"].append(f"{name} was mentioned: {sentence_with(text, name)}")
                node["source_id"].append(chunk)
                node["file_path"].append(record["file_path"])
            for a, b in itertools.pairwise(names):
                edge = edges.setdefault((min(a, b), max(a, b)), {"description": [], "source_id": [], "file_path": []})
                edge["description"].append(f"{a} and {b} came up together")
                edge["source_id"].append(chunk)
                edge["file_path"].append(record["file_path"])

        def joined(values: dict[str, list[str]]) -> dict[str, str]:
            return {key: SEPARATOR.join(dict.fromkeys(items)) for key, items in values.items()}

        return (
            {name: {"entity_id": name, "entity_type": "concept", **joined(node)} for name, node in nodes.items()},
            {pair: {"weight": 1.0, "keywords": "mentioned together", **joined(edge)} for pair, edge in edges.items()},
        )

    async def _graphs(self, request: web.Request) -> web.Response:
        if "label" not in request.query:
            return web.json_response({"detail": [{"loc": ["query", "label"], "msg": "Field required"}]}, status=422)
        if self.graph_error is not None:
            return web.json_response({"detail": self.graph_error}, status=500)
        label = request.query["label"]
        max_depth, max_nodes = int(request.query.get("max_depth", 3)), int(request.query.get("max_nodes", 1000))
        nodes, edges = self._graph()
        neighbours: dict[str, set[str]] = {name: set() for name in nodes}
        for a, b in edges:
            neighbours[a].add(b)
            neighbours[b].add(a)
        if label == "*":  # the most connected, ties by label
            ranked = sorted(nodes, key=lambda name: (-len(neighbours[name]), name))
        else:  # breadth first from the label, up to max_depth
            ranked, queue = [], deque([(label, 0)] if label in nodes else [])
            while queue:
                name, depth = queue.popleft()
                if name in ranked:
                    continue
                ranked.append(name)
                if depth < max_depth:
                    queue.extend((other, depth + 1) for other in sorted(neighbours[name]) if other not in ranked)
        kept = ranked[:max_nodes]
        return web.json_response(
            {
                "nodes": [{"id": name, "labels": [name], "properties": nodes[name]} for name in kept],
                "edges": [
                    {"id": f"{a}-{b}", "type": "DIRECTED", "source": a, "target": b, "properties": properties}
                    for (a, b), properties in edges.items()
                    if a in kept and b in kept
                ],
                "is_truncated": len(ranked) > max_nodes,
            }
        )

    async def _labels(self, request: web.Request) -> web.Response:
        nodes, _ = self._graph()
        return web.json_response(sorted(nodes))

    async def _search_labels(self, request: web.Request) -> web.Response:
        if "q" not in request.query:
            return web.json_response({"detail": [{"loc": ["query", "q"], "msg": "Field required"}]}, status=422)
        limit = int(request.query.get("limit", 50))
        if not 1 <= limit <= 100:
            detail = [{"loc": ["query", "limit"], "msg": "Input should be between 1 and 100"}]
            return web.json_response({"detail": detail}, status=422)
        if self.graph_error is not None:
            return web.json_response({"detail": self.graph_error}, status=500)
        wanted = request.query["q"].lower().strip()
        nodes, _ = self._graph()
        if not wanted:
            return web.json_response([])

        def score(name: str) -> int:  # LightRAG's: the name itself, then a prefix, then shorter names first
            lower = name.lower()
            if lower == wanted:
                return 1000
            if lower.startswith(wanted):
                return 500
            return 100 - len(name) + (50 if f" {wanted}" in lower or f"_{wanted}" in lower else 0)

        found = sorted((name for name in nodes if wanted in name.lower()), key=lambda name: (-score(name), name))
        return web.json_response(found[:limit])

"""A small fake of the LightRAG server's HTTP API on 127.0.0.1, for the `server` backend's tests.

It keeps documents per workspace (the `LIGHTRAG-WORKSPACE` header), names them `doc-{md5}` as the
real server does, answers `/query/data` (or, with `legacy=True`, only `/query` with a context string in
LightRAG's format) with the documents sharing a word with the query, and checks `X-API-Key`.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler


@dataclass
class FakeLightRagServer:
    api_key: str | None = None
    legacy: bool = False
    documents: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    tracks: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeLightRagServer:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/health", self._health)
        app.router.add_post("/documents/text", self._insert)
        app.router.add_get("/documents/track_status/{track_id}", self._track)
        app.router.add_delete("/documents/delete_document", self._delete)
        app.router.add_post("/query", self._query)
        if not self.legacy:
            app.router.add_post("/query/data", self._query_data)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        workspace = request.headers.get("LIGHTRAG-WORKSPACE", "")
        self.requests.append((request.method, request.path, workspace))
        if self.api_key and request.path != "/health" and request.headers.get("X-API-Key") != self.api_key:
            return web.json_response({"detail": "Invalid API Key"}, status=403)
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "healthy", "core_version": "fake"})

    async def _insert(self, request: web.Request) -> web.Response:
        body = await request.json()
        workspace = self.documents.setdefault(request.headers.get("LIGHTRAG-WORKSPACE", ""), {})
        doc_id = "doc-" + hashlib.md5(body["text"].encode()).hexdigest()
        if doc_id in workspace:
            return web.json_response({"status": "duplicated", "message": "exists", "track_id": ""})
        workspace[doc_id] = {"text": body["text"], "file_path": body.get("file_source", "unknown_source")}
        track_id = f"insert_{uuid.uuid4().hex[:8]}"
        self.tracks[track_id] = [(request.headers.get("LIGHTRAG-WORKSPACE", ""), doc_id)]
        return web.json_response({"status": "success", "message": "queued", "track_id": track_id})

    async def _track(self, request: web.Request) -> web.Response:
        track_id = request.match_info["track_id"]
        documents = [
            {"id": doc_id, "status": "processed", "file_path": self.documents[ws][doc_id]["file_path"]}
            for ws, doc_id in self.tracks.get(track_id, [])
            if doc_id in self.documents.get(ws, {})
        ]
        return web.json_response({"track_id": track_id, "documents": documents, "total_count": len(documents)})

    async def _delete(self, request: web.Request) -> web.Response:
        body = await request.json()
        workspace = self.documents.get(request.headers.get("LIGHTRAG-WORKSPACE", ""), {})
        for doc_id in body["doc_ids"]:
            workspace.pop(doc_id, None)
        return web.json_response({"status": "deletion_started", "message": "ok", "doc_id": ",".join(body["doc_ids"])})

    def _matches(self, request: web.Request, query: str) -> list[dict[str, Any]]:
        words = set(re.findall(r"\w{4,}", query.lower()))
        workspace = self.documents.get(request.headers.get("LIGHTRAG-WORKSPACE", ""), {})
        return [d for d in workspace.values() if words & set(re.findall(r"\w{4,}", d["text"].lower()))]

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

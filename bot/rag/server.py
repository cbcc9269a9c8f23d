"""`LightRagServerBackend`: a running LightRAG server over its HTTP API, for more than one machine.

`POST /documents/text` (then `GET /documents/track_status/{track_id}` until processed),
`POST /query/data` for structured context (`POST /query` with `only_need_context` on servers
without it), `DELETE /documents/delete_document`, `GET /health`. The API key goes in `X-API-Key`;
the LightRAG workspace of each call (one per chat with `memory.scope: chat`) in `LIGHTRAG-WORKSPACE`.
The server names documents itself (by content), so the id it gave is kept with each document.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from bot.rag.backend import RagBackendError, RagQuery, RagSnippet
from bot.rag.documents import RagDocument
from bot.rag.embedded import snippets_from_data
from bot.settings import RagConfig

log = logging.getLogger(__name__)

TRACK_POLL_SECONDS = 0.2


class LightRagServerBackend:
    """LightRAG behind its REST API."""

    name = "server"

    def __init__(self, config: Callable[[], RagConfig], api_key: str | None) -> None:
        self._config = config
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._query_data_supported = True

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"X-API-Key": self._api_key} if self._api_key else {}
            self._session = aiohttp.ClientSession(headers=headers)
        return self._session

    async def _call(self, method: str, path: str, workspace: str | None, body: Any = None) -> Any:
        config = self._config()
        url = config.server_url.rstrip("/") + path
        headers = {"LIGHTRAG-WORKSPACE": workspace} if workspace else {}
        timeout = aiohttp.ClientTimeout(total=config.server_timeout_seconds)
        try:
            async with self._client().request(method, url, json=body, headers=headers, timeout=timeout) as response:
                text = await response.text()
                if response.status >= 400:
                    raise RagBackendError(f"{method} {path}: HTTP {response.status}: {text[:200]}")
                return json.loads(text) if text else None
        except aiohttp.ClientError as error:
            raise RagBackendError(f"{method} {path}: {type(error).__name__}: {error}") from error
        except json.JSONDecodeError as error:
            raise RagBackendError(f"{method} {path}: the answer is not JSON") from error

    async def health(self) -> dict[str, Any]:
        return dict(await self._call("GET", "/health", None) or {})

    async def insert(self, workspace: str, documents: list[RagDocument]) -> dict[str, str]:
        tracks: dict[str, str] = {}
        for doc in documents:
            answer = await self._call("POST", "/documents/text", workspace, {"text": doc.text, "file_source": doc.id})
            if not isinstance(answer, dict) or answer.get("status") == "failure":
                raise RagBackendError(f"the server refused {doc.id}: {answer}")
            if answer.get("status") == "duplicated":
                continue  # the same text is in the graph already
            tracks[doc.id] = str(answer.get("track_id", ""))
        backend_ids: dict[str, str] = {}
        deadline = time.monotonic() + self._config().insert_timeout_seconds
        for doc_id, track_id in tracks.items():
            backend_ids[doc_id] = await self._wait_processed(workspace, doc_id, track_id, deadline)
        return backend_ids

    async def _wait_processed(self, workspace: str, doc_id: str, track_id: str, deadline: float) -> str:
        while True:
            answer = await self._call("GET", f"/documents/track_status/{track_id}", workspace)
            documents = (answer or {}).get("documents") or []
            ours = [d for d in documents if d.get("file_path") == doc_id] or documents
            if ours:
                status = str(ours[0].get("status", "")).lower()
                if status == "processed":
                    return str(ours[0].get("id", doc_id))
                if status == "failed":
                    raise RagBackendError(f"the server failed {doc_id}: {ours[0].get('error_msg') or '?'}")
            if time.monotonic() > deadline:
                raise RagBackendError(f"{doc_id} still processing on the server")
            await asyncio.sleep(TRACK_POLL_SECONDS)

    async def query(self, workspace: str, query: RagQuery) -> list[RagSnippet]:
        body = {
            "query": query.text,
            "mode": query.mode,
            "only_need_context": True,
            "top_k": query.top_k,
            "chunk_top_k": query.chunk_top_k,
            "max_total_tokens": query.max_tokens,
            "enable_rerank": False,
        }
        if self._query_data_supported:
            try:
                answer = await self._call("POST", "/query/data", workspace, body)
                return snippets_from_data((answer or {}).get("data") or {})
            except RagBackendError as error:
                if "HTTP 404" not in str(error):
                    raise
                self._query_data_supported = False
        answer = await self._call("POST", "/query", workspace, body)
        return snippets_from_context(str((answer or {}).get("response", "")))

    async def delete(self, workspace: str, backend_ids: list[str]) -> None:
        if backend_ids:
            body = {"doc_ids": backend_ids, "delete_file": False, "delete_llm_cache": True}
            await self._call("DELETE", "/documents/delete_document", workspace, body)

    async def open(self, workspace: str) -> None:
        return None  # the server holds its graphs itself

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def snippets_from_context(context: str) -> list[RagSnippet]:
    """The context string of `POST /query` (JSON lines in fenced blocks) as snippets; the whole
    string when it has none, and nothing for LightRAG's no-context answer."""
    if not context.strip() or context.rstrip().endswith("[no-context]"):
        return []
    data: dict[str, list[dict[str, Any]]] = {"entities": [], "relationships": [], "chunks": []}
    for line in context.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "entity" in record:
            data["entities"].append({"entity_name": record["entity"], "entity_type": record.get("type", ""), **record})
        elif "entity1" in record:
            data["relationships"].append({"src_id": record["entity1"], "tgt_id": record.get("entity2", ""), **record})
        elif "content" in record:
            data["chunks"].append(record)
    snippets = snippets_from_data(data)
    return snippets or [RagSnippet("text", context.strip())]

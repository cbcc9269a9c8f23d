"""`LightRagServerBackend`: a running LightRAG server over its HTTP API, for more than one machine.

`POST /documents/text` (then `GET /documents/track_status/{track_id}` until processed),
`POST /query/data` for structured context (`POST /query` with `only_need_context` on servers
without it), `DELETE /documents/delete_document` (then `GET /documents/pipeline_status` until the
deletion is done), `GET /graphs`, `GET /graph/label/list` and
`GET /graph/label/search` for the console's drawing and search, `GET /health`. The API key goes in `X-API-Key`;
the LightRAG workspace of each call (one per chat with `memory.scope: chat`) in `LIGHTRAG-WORKSPACE`.
The server names documents itself, so the id it gave is kept with each document: a forget deletes that id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Collection
from typing import Any

import aiohttp

from bot.rag.backend import NEIGHBOURHOOD_DEPTH, GraphView, RagBackendError, RagQuery, RagSnippet
from bot.rag.documents import RagDocument
from bot.rag.embedded import snippets_from_data
from bot.rag.graph_view import ranked_names, view_of
from bot.settings import RagConfig

log = logging.getLogger(__name__)

TRACK_POLL_SECONDS = 0.2
DELETE_RETRY_SECONDS = 0.5
# Answers of `DELETE /documents/delete_document` that mean the deletion runs (older servers say `success`).
DELETE_TAKEN = frozenset({"deletion_started", "success"})
LIST_PAGE_SIZE = 200  # the largest page `/documents/paginated` serves
SEARCH_LIMIT = 100  # the most names `/graph/label/search` answers with
# How the server names the document that already holds a text it refused as a duplicate
# ("Identical content already exists under another filename. Original doc_id: X, Status: Y").
ORIGINAL_DOC_ID = re.compile(r"Original doc_id: ([^\s,]+)")


class ServerAnswerError(RagBackendError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LightRagServerBackend:
    """LightRAG behind its REST API."""

    name = "server"
    # The server keeps one graph, whatever `LIGHTRAG-WORKSPACE` a request names (only `/health` reads it).
    keeps_workspaces_apart = False

    def __init__(self, config: Callable[[], RagConfig], api_key: str | None) -> None:
        self._config = config
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._query_data_supported = True
        self._label_search_supported = True

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"X-API-Key": self._api_key} if self._api_key else {}
            self._session = aiohttp.ClientSession(headers=headers)
        return self._session

    async def _call(
        self, method: str, path: str, workspace: str | None, body: Any = None, params: dict[str, str] | None = None
    ) -> Any:
        config = self._config()
        url = config.server_url.rstrip("/") + path
        headers = {"LIGHTRAG-WORKSPACE": workspace} if workspace else {}
        timeout = aiohttp.ClientTimeout(total=config.server_timeout_seconds)
        request = self._client().request(method, url, json=body, params=params, headers=headers, timeout=timeout)
        try:
            async with request as response:
                text = await response.text()
                if response.status >= 400:
                    raise ServerAnswerError(
                        f"{method} {path}: HTTP {response.status}: {text[:200]}", response.status, text
                    )
                return json.loads(text) if text else None
        except aiohttp.ClientError as error:
            raise RagBackendError(f"{method} {path}: {type(error).__name__}: {error}") from error
        except TimeoutError as error:
            # aiohttp's own limit (a caller's wait_for cancels instead): the server took the request and went quiet.
            raise RagBackendError(
                f"{method} {path}: no answer within {config.server_timeout_seconds:g} s (rag.serverTimeoutSeconds)"
            ) from error
        except json.JSONDecodeError as error:
            raise RagBackendError(f"{method} {path}: the answer is not JSON") from error

    async def health(self) -> dict[str, Any]:
        return dict(await self._call("GET", "/health", None) or {})

    async def insert(self, workspace: str, documents: list[RagDocument]) -> dict[str, str]:
        tracks: dict[str, str] = {}
        known: dict[str, str] = {}
        deadline = time.monotonic() + self._config().insert_timeout_seconds
        for doc in documents:
            try:
                answer = await self._call(
                    "POST", "/documents/text", workspace, {"text": doc.text, "file_source": doc.id}
                )
            except ServerAnswerError as error:
                if error.status != 409 or "already contains" not in error.body:
                    raise
                # The server holds a document under this name already: an earlier try whose wait ran out
                # while the server went on to process it.
                known[doc.id] = await self._held_under(workspace, doc.id, deadline)
                continue
            if not isinstance(answer, dict) or answer.get("status") == "failure":
                raise RagBackendError(f"the server refused {doc.id}: {answer}")
            if answer.get("status") == "duplicated":
                # Older servers answer a name they hold already with 200 and this status.
                known[doc.id] = await self._held_under(workspace, doc.id, deadline)
                continue
            tracks[doc.id] = str(answer.get("track_id", ""))
        for doc_id, track_id in tracks.items():
            known[doc_id] = await self._wait_processed(workspace, doc_id, track_id, deadline)
        return known

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
                    return self._original_of(doc_id, ours[0])
            if time.monotonic() > deadline:
                raise RagBackendError(f"{doc_id} still processing on the server")
            await asyncio.sleep(TRACK_POLL_SECONDS)

    @staticmethod
    def _original_of(doc_id: str, failed: dict[str, Any]) -> str:
        """The id of the document that holds the text of `doc_id`, which the server refused as a duplicate.

        Recorded as this exchange's own: the graph keeps one copy of a text, so forgetting the exchange
        deletes that copy, which is what forgetting those words means (an exchange that shares it and is
        not forgotten is indexed again). Any other failure is an error."""
        message = str(failed.get("error_msg") or "?")
        metadata = failed.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        found = ORIGINAL_DOC_ID.search(message)
        original = metadata.get("original_doc_id") or (found.group(1) if found else None)
        # Several documents share the name, and the server names none of them the original.
        if not original or metadata.get("duplicate_kind") == "filename_conflict":
            raise RagBackendError(f"the server failed {doc_id}: {message}")
        log.info("[RAG] The server holds the text of %s already, as %s: %s", doc_id, original, message)
        return str(original)

    async def _held_under(self, workspace: str, doc_id: str, deadline: float) -> str:
        """The id of the document the server holds under the name `doc_id`, once it is processed.

        A document it failed is deleted, and the insert is an error: the next try sends it again."""
        held = (await self._find_by_names(workspace, [doc_id])).get(doc_id)
        if held is None:
            raise RagBackendError(
                f"the server says it holds {doc_id} but lists no document of that name; a forget cannot reach it"
            )
        status = str(held.get("status", "")).lower()
        server_id = str(held["id"])
        if status == "processed":
            log.info("[RAG] The server holds %s already, as %s", doc_id, server_id)
            return server_id
        if status == "failed":
            await self.delete(workspace, [server_id])
            raise RagBackendError(
                f"the server had failed {doc_id} ({held.get('error_msg') or '?'}); deleted {server_id} to send it again"
            )
        if held.get("track_id"):
            return await self._wait_processed(workspace, doc_id, str(held["track_id"]), deadline)
        raise RagBackendError(
            f"{doc_id} is {status or 'in an unknown state'} on the server, which names no track for it"
        )

    async def _find_by_names(self, workspace: str, names: list[str]) -> dict[str, dict[str, Any]]:
        """The server's record of the document of each name it holds, read from its paginated list (the
        API finds no document by name) in one pass; a name it does not hold is left out. Pointer records
        of refused duplicates are not documents. A server that lists no documents is an error: it cannot
        say what it holds."""
        wanted = set(names)
        found: dict[str, dict[str, Any]] = {}
        page = 1
        while wanted - found.keys():
            body = {"page": page, "page_size": LIST_PAGE_SIZE, "sort_field": "file_path", "sort_direction": "asc"}
            try:
                answer = await self._call("POST", "/documents/paginated", workspace, body) or {}
            except ServerAnswerError as error:
                if error.status != 404:
                    raise
                raise RagBackendError(
                    f"the server lists no documents ({error}), so {', '.join(names)} cannot be found by name"
                ) from error
            for held in answer.get("documents") or []:
                metadata = held.get("metadata") or {}
                name = held.get("file_path")
                if name in wanted and name not in found and held.get("id") and not metadata.get("is_duplicate"):
                    found[str(name)] = dict(held)
            if not (answer.get("pagination") or {}).get("has_next"):
                break
            page += 1
        return found

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
        """Delete documents on the server. It refuses with 200 `busy` while its pipeline works (indexing
        anything in the workspace), deleting nothing: asked again until it takes the deletion, for one
        `serverTimeoutSeconds` at most, then an error (a forget must never look done when it is not). It
        takes a deletion with `deletion_started` and deletes in the background: waited for, another
        `serverTimeoutSeconds` at most."""
        if not backend_ids:
            return
        body = {"doc_ids": backend_ids, "delete_file": False, "delete_llm_cache": True}
        deadline = time.monotonic() + self._config().server_timeout_seconds
        while True:
            answer = await self._call("DELETE", "/documents/delete_document", workspace, body)
            status = str((answer or {}).get("status", "")) if isinstance(answer, dict) else ""
            if status != "busy" or time.monotonic() > deadline:
                break
            await asyncio.sleep(DELETE_RETRY_SECONDS)
        if status not in DELETE_TAKEN:
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise RagBackendError(f"the server did not delete {', '.join(backend_ids)}: {status or '?'}: {message}")
        if status == "deletion_started":
            await self._wait_deleted(workspace, backend_ids)

    async def _wait_deleted(self, workspace: str, backend_ids: list[str]) -> None:
        """Wait for a deletion the server runs in the background: its pipeline is busy until it is done. Until
        then the documents are still found, and the server refuses new documents (409), so a forget must not
        return before. A server older than `/documents/pipeline_status` deleted before it answered."""
        timeout = self._config().server_timeout_seconds
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = await self._call("GET", "/documents/pipeline_status", workspace)
            except ServerAnswerError as error:
                if error.status != 404:
                    raise
                return
            if not (isinstance(answer, dict) and answer.get("busy")):
                return
            if time.monotonic() > deadline:
                raise RagBackendError(
                    f"the server started deleting {', '.join(backend_ids)} and had not finished within {timeout:g} s"
                    " (rag.serverTimeoutSeconds)"
                )
            await asyncio.sleep(TRACK_POLL_SECONDS)

    async def delete_named(self, workspace: str, names: list[str], deleted: Collection[str] = ()) -> list[str]:
        """Delete what the server holds under each name (the `file_source` it was sent with), found in its
        list in one pass; a name it does not hold is skipped."""
        held = await self._find_by_names(workspace, names) if names else {}
        found = [
            server_id for server_id in dict.fromkeys(str(r["id"]) for r in held.values()) if server_id not in deleted
        ]
        await self.delete(workspace, found)
        return found

    async def graph(self, workspace: str, max_entities: int, around: str | None = None) -> GraphView:
        """The server's most connected entities (`label=*`) or an entity's neighbourhood (`label=` its name), and
        the relations between them; for the whole graph, its labels are listed only when the graph holds more
        than is drawn (to count them). The server serves no chunk's text: each entity names the documents it was
        drawn from instead."""
        label, depth = ("*", 1) if around is None else (around, NEIGHBOURHOOD_DEPTH)
        query = {"label": label, "max_depth": str(depth), "max_nodes": str(max_entities)}
        drawn = await self._call("GET", "/graphs", workspace, params=query)
        if not isinstance(drawn, dict):
            raise RagBackendError(f"GET /graphs: the answer is not a graph: {str(drawn)[:200]}")
        total = 0
        if around is None and drawn.get("is_truncated"):
            labels = await self._call("GET", "/graph/label/list", workspace)
            total = len(labels) if isinstance(labels, list) else 0
        return view_of(drawn, total)

    async def search_entities(self, workspace: str, query: str, limit: int) -> list[str]:
        """`GET /graph/label/search`; a server older than it lists every name (`GET /graph/label/list`), and those
        that contain `query` are ranked here as the server ranks them."""
        if self._label_search_supported:
            params = {"q": query, "limit": str(min(limit, SEARCH_LIMIT))}
            try:
                found = await self._call("GET", "/graph/label/search", workspace, params=params)
            except ServerAnswerError as error:
                if error.status != 404:
                    raise
                self._label_search_supported = False
            else:
                if not isinstance(found, list):
                    raise RagBackendError(f"GET /graph/label/search: the answer is not a list: {str(found)[:200]}")
                return [str(name) for name in found]
        labels = await self._call("GET", "/graph/label/list", workspace)
        if not isinstance(labels, list):
            raise RagBackendError(f"GET /graph/label/list: the answer is not a list: {str(labels)[:200]}")
        wanted = query.strip().lower()
        return ranked_names(query, [[str(name) for name in labels if wanted in str(name).lower()]], limit)

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

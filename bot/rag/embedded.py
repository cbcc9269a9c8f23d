"""`EmbeddedLightRag`: lightrag-hku inside the bot, one LightRAG instance per LightRAG workspace.

Storages are LightRAG's file backends in `workspace/rag/{ragWorkspace}/` (`storage: files`) or its
PostgreSQL backends (`storage: postgres`: KV, pgvector, a plain-table graph). The PostgreSQL connection
is the database of `BOT_DATABASE_URL` when it is set (`lightrag_postgres_environment`), else LightRAG's
POSTGRES_* environment variables as the operator set them. Every model call goes through the bot's `LlmClient`
(entity extraction with the extraction model, off the reply path); vectors come from the bundled
offline embedder by default (`rag.embeddingModel: "local"`) or the endpoint's `/embeddings`, and the
message itself is given as the query's keywords, so reading the graph makes no model call at all. The
embedder a graph was built with is pinned in `rag/embedder.json`: vectors of another model are not
comparable, so changing `rag.embeddingModel` applies to a new graph (delete `rag/` to rebuild). The
tokenizer is `OfflineTokenizer`, so nothing is downloaded. Everything LightRAG would otherwise read
from the environment that changes its behaviour (workspace, top-k, token budgets) is passed
explicitly. The query cache is off, so a forgotten document cannot come back from it, and each
document's extraction cache is deleted with it.

LightRAG keeps some state module-wide, keyed by workspace name: instances in one process must differ
in `workspace`, and the process-wide state is released when the last adapter closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

from bot.llm.client import ChatRequest, LlmClient
from bot.llm.embedders import Embedders
from bot.llm.local_embeddings import LOCAL_MODEL, LocalEmbedder
from bot.logging_setup import add_secrets
from bot.rag.backend import NEIGHBOURHOOD_DEPTH, GraphView, RagBackendError, RagQuery, RagSnippet
from bot.rag.documents import RagDocument
from bot.rag.graph_batches import use_batched_reads
from bot.rag.graph_view import source_chunk_ids, view_of
from bot.rag.keywords import content_words
from bot.rag.tokenizer import OfflineTokenizer
from bot.rag.unfinished import clear_failed, clear_left_by_a_stop, status_fields, status_of
from bot.settings import RagConfig

log = logging.getLogger(__name__)

StorageKind = Literal["files", "postgres"]
_FILE_STORAGES = {
    "kv_storage": "JsonKVStorage",
    "vector_storage": "NanoVectorDBStorage",
    "graph_storage": "NetworkXStorage",
    "doc_status_storage": "JsonDocStatusStorage",
}
_POSTGRES_STORAGES = {
    "kv_storage": "PGKVStorage",
    "vector_storage": "PGVectorStorage",
    "graph_storage": "PGTableGraphStorage",
    "doc_status_storage": "PGDocStatusStorage",
}
# A delete is refused while LightRAG's pipeline is busy; it is tried again this often.
DELETE_ATTEMPTS = 5
DELETE_RETRY_SECONDS = 0.5
STATUS_POLL_SECONDS = 0.05
# Room LightRAG's total budget keeps for its own (unused here) answer prompt and the query.
LIGHTRAG_PROMPT_TOKENS = 3000
MIN_PART_TOKENS = 200
# Connections LightRAG's pool keeps to the database of `BOT_DATABASE_URL` (its own default is 50, which with the
# bot's own connections and a few replicas would pass PostgreSQL's default `max_connections`).
GRAPH_MAX_CONNECTIONS = 10
# The advisory lock under which processes sharing a database create LightRAG's tables ("bot-rag" in ASCII).
TABLES_LOCK_KEY = 0x626F742D726167
TABLES_CONNECT_TIMEOUT_SECONDS = 10.0
# LightRAG's own defaults, passed explicitly so CHUNK_SIZE and friends in the environment cannot change them.
CHUNK_TOKENS = 1200
CHUNK_OVERLAP_TOKENS = 100
WORKER_SHUTDOWN_SECONDS = 5.0
# The most entities one read of a graph returns (LightRAG's own default, passed so MAX_GRAPH_NODES cannot change it).
MAX_GRAPH_NODES = 1000
# Adapters in this process that have opened a LightRAG instance and not closed yet.
_open_adapters = 0
EMBEDDER_FILE = "embedder.json"
# The endpoint model a graph without `embedder.json` was built with: such a graph keeps it.
LEGACY_EMBEDDING_MODEL = "text-embedding-3-small"


def _import_lightrag() -> Any:
    """Import lightrag (about a second of CPU), without pypinyin."""
    with _without_pypinyin():
        module = importlib.import_module("lightrag")
        # `lightrag` loads its submodules lazily; `utils` sets the logger up when it is first imported.
        importlib.import_module("lightrag.lightrag")
    _route_lightrag_logs()
    return module


class _PinyinNoticeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pypinyin" not in record.getMessage()


@contextlib.contextmanager
def _without_pypinyin() -> Iterator[None]:
    """LightRAG imports pypinyin when it is imported, to sort Chinese file names in document listings the bot
    never asks for; its phrase tables are about 55 MB of every process that opens a graph. Without it, LightRAG
    sorts those names as plain text, and says so in a warning, which is dropped. A pypinyin something else
    imported already is left as it is."""
    if "pypinyin" in sys.modules:
        yield
        return
    logger = logging.getLogger("lightrag")
    notice_filter = _PinyinNoticeFilter()
    logger.addFilter(notice_filter)
    sys.modules["pypinyin"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        yield
    finally:
        del sys.modules["pypinyin"]
        logger.removeFilter(notice_filter)


def _route_lightrag_logs() -> None:
    """LightRAG logs to its own console handler at INFO, a dozen lines per document. Its warnings and
    errors go through the bot's logging instead (one format, secrets scrubbed); the rest is dropped."""
    for name in ("lightrag", "nano-vectordb"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.WARNING)


class EmbeddedLightRag:
    """LightRAG running in this process."""

    name = "embedded"
    keeps_workspaces_apart = True

    def __init__(
        self,
        working_dir: Path,
        llm: LlmClient,
        config: Callable[[], RagConfig],
        default_model: Callable[[], str],
        storage: StorageKind = "files",
        embedders: Embedders | None = None,
        postgres_url: str | None = None,
    ) -> None:
        """`postgres_url` (with `storage` postgres): the database the graph lives in; None: LightRAG's POSTGRES_*
        variables say."""
        self._working_dir = working_dir
        self._postgres_url = postgres_url
        self._llm = llm
        self._embedders = embedders or Embedders(llm)
        self._embedding: tuple[str, int] | None = None
        self._config = config
        self._default_model = default_model
        self._storage = storage
        self._instances: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._create_lock = asyncio.Lock()
        self._lightrag: Any = None
        self._closed = False
        self._opened = False

    def extraction_model(self) -> str:
        """The model LightRAG's calls go to: `rag.extractionModel`, else the default the bot was given
        (a `fast` model of `llm.models`, `llm.balancedModel`, the chat model), read live."""
        return self._config().extraction_model or self._default_model()

    async def insert(self, workspace: str, documents: list[RagDocument]) -> dict[str, str]:
        rag = await self._instance(workspace)
        ids = [doc.id for doc in documents]
        async with self._lock(workspace):
            await clear_failed(rag, workspace, ids)
            await rag.ainsert([doc.text for doc in documents], ids=ids, file_paths=ids)
            statuses = await self._wait_processed(rag, ids)
        failed = {doc_id: status for doc_id, status in statuses.items() if status["status"] == "failed"}
        if failed:
            first = next(iter(failed.values()))
            raise RagBackendError(f"{len(failed)} of {len(ids)} documents failed: {first.get('error_msg') or '?'}")
        return {doc_id: doc_id for doc_id in ids}

    async def _wait_processed(self, rag: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
        # `ainsert` may return before its documents are processed when the pipeline was busy.
        deadline = time.monotonic() + self._config().insert_timeout_seconds
        while True:
            found = await rag.aget_docs_by_ids(ids)
            statuses = {doc_id: {**status_fields(value), "status": status_of(value)} for doc_id, value in found.items()}
            # Identical content is dropped silently by LightRAG (no status): it is in the graph already.
            if all(status["status"] in ("processed", "failed") for status in statuses.values()):
                return statuses
            if time.monotonic() > deadline:
                raise RagBackendError(f"documents still processing after {self._config().insert_timeout_seconds:.0f}s")
            await asyncio.sleep(STATUS_POLL_SECONDS)

    async def query(self, workspace: str, query: RagQuery) -> list[RagSnippet]:
        rag = await self._instance(workspace)
        lightrag = self._lightrag
        if not content_words(query.text):
            return []  # nothing to look up (a greeting)
        # `rag.cosineThreshold` applies live: LightRAG reads it from its vector storages at each search.
        threshold = self._config().cosine_threshold
        for storage in (rag.entities_vdb, rag.relationships_vdb, rag.chunks_vdb):
            storage.cosine_better_than_threshold = threshold
        # The message itself stands for both levels of keywords: LightRAG then asks no model for them,
        # and embeds one text where it would embed three (the message, and each level's keywords).
        param = lightrag.QueryParam(
            hl_keywords=[query.text],
            ll_keywords=[query.text],
            mode=query.mode,
            only_need_context=True,
            top_k=query.top_k,
            chunk_top_k=query.chunk_top_k,
            # LightRAG's total counts its own answer prompt too; the exact budget is applied by the service.
            max_entity_tokens=max(MIN_PART_TOKENS, query.max_tokens // 2),
            max_relation_tokens=max(MIN_PART_TOKENS, query.max_tokens // 2),
            max_total_tokens=query.max_tokens + LIGHTRAG_PROMPT_TOKENS,
            enable_rerank=False,
        )
        result = await rag.aquery_data(query.text, param=param)
        if result.get("status") != "success":  # nothing relevant found: not an error
            log.debug("[RAG] No context from LightRAG: %s", result.get("message"))
            return []
        return snippets_from_data(result.get("data") or {})

    async def delete(self, workspace: str, backend_ids: list[str]) -> None:
        await self._delete(workspace, backend_ids)

    async def delete_named(self, workspace: str, names: list[str], deleted: Collection[str] = ()) -> list[str]:
        # A document's name is its id in LightRAG.
        return await self._delete(workspace, [name for name in dict.fromkeys(names) if name not in deleted])

    async def _delete(self, workspace: str, backend_ids: list[str]) -> list[str]:
        """Delete each id LightRAG holds (one it does not hold is skipped); returns those it held."""
        rag = await self._instance(workspace)
        held: list[str] = []
        async with self._lock(workspace):
            for doc_id in backend_ids:
                for attempt in range(1, DELETE_ATTEMPTS + 1):
                    result = await rag.adelete_by_doc_id(doc_id, delete_llm_cache=True)
                    if result.status == "success":
                        held.append(doc_id)
                        break
                    if result.status == "not_found" or result.status_code == 404:
                        break
                    if attempt == DELETE_ATTEMPTS:
                        raise RagBackendError(f"could not delete {doc_id}: {result.message}")
                    await asyncio.sleep(DELETE_RETRY_SECONDS)
        return held

    async def graph(self, workspace: str, max_entities: int, around: str | None = None) -> GraphView:
        """Read through LightRAG's storage API, so the file and the PostgreSQL storages answer alike: the
        whole graph's most connected entities (`*`) or an entity's neighbourhood, their chunks' text, and, for
        the whole graph, every label only when the graph holds more than is drawn (to count them)."""
        label, depth = ("*", 1) if around is None else (around, NEIGHBOURHOOD_DEPTH)
        try:
            rag = await self._instance(workspace)
            drawn = (await rag.get_knowledge_graph(label, max_depth=depth, max_nodes=max_entities)).model_dump()
            chunk_ids = source_chunk_ids(drawn)
            found = await rag.text_chunks.get_by_ids(chunk_ids) if chunk_ids else []
            chunks = {
                chunk_id: str(chunk.get("content", ""))
                for chunk_id, chunk in zip(chunk_ids, found, strict=True)
                if isinstance(chunk, dict)
            }
            counted = around is None and drawn.get("is_truncated")
            total = len(await rag.get_graph_labels()) if counted else 0
        except RagBackendError:
            raise
        except Exception as error:  # the database's own errors (asyncpg, connection refused) among them
            raise RagBackendError(f"reading the graph {workspace}: {type(error).__name__}: {error}") from error
        return view_of(drawn, total, chunks)

    async def search_entities(self, workspace: str, query: str, limit: int) -> list[str]:
        try:
            rag = await self._instance(workspace)
            return [str(name) for name in await rag.chunk_entity_relation_graph.search_labels(query, limit)]
        except RagBackendError:
            raise
        except Exception as error:
            raise RagBackendError(f"searching the graph {workspace}: {type(error).__name__}: {error}") from error

    async def open(self, workspace: str) -> None:
        await self._instance(workspace)

    async def close(self) -> None:
        global _open_adapters
        if self._closed:
            return
        self._closed = True
        for workspace, rag in list(self._instances.items()):
            try:
                await _drop_unfinished_vectors(rag)
                await _stop_call_workers(rag)
                await rag.finalize_storages()
            except Exception as error:
                log.warning("[RAG] Closing LightRAG workspace %s failed: %s", workspace, error)
        self._instances.clear()
        if self._opened:
            _open_adapters -= 1
            if _open_adapters == 0:
                _release_shared_state()

    def _lock(self, workspace: str) -> asyncio.Lock:
        return self._locks.setdefault(workspace, asyncio.Lock())

    async def _instance(self, workspace: str) -> Any:
        rag = self._instances.get(workspace)
        if rag is not None:
            return rag
        async with self._create_lock:
            if workspace not in self._instances:
                self._instances[workspace] = await self._create(workspace)
        return self._instances[workspace]

    async def _create(self, workspace: str) -> Any:
        if self._closed:
            raise RagBackendError("the RAG backend is closed")
        if self._lightrag is None:
            self._lightrag = await asyncio.to_thread(_import_lightrag)
        global _open_adapters
        if not self._opened:
            if _open_adapters == 0:
                _release_shared_state()  # whatever an adapter that was never closed left behind
            _open_adapters += 1
            self._opened = True
        lightrag = self._lightrag
        utils = importlib.import_module("lightrag.utils")
        config = self._config()
        self._working_dir.mkdir(parents=True, exist_ok=True)
        storages = dict(_POSTGRES_STORAGES if self._storage == "postgres" else _FILE_STORAGES)
        if self._storage == "postgres":
            if self._postgres_url is not None:
                _use_postgres_environment(lightrag_postgres_environment(self._postgres_url))
            _check_postgres_environment()
            if config.postgres_vectors == "files":
                storages["vector_storage"] = _FILE_STORAGES["vector_storage"]
        _, dimensions = self._pinned_embedding()

        # Plain functions, not bound methods: LightRAG deep-copies its fields, and a bound method would
        # drag this adapter (and the model client's locks) into the copy.
        async def complete(prompt: str, system_prompt: str | None = None, **kwargs: Any) -> str:
            return await self._complete(prompt, system_prompt, kwargs.get("history_messages"))

        async def embed(texts: list[str], **kwargs: Any) -> np.ndarray:
            return await self._embed(texts, query=kwargs.get("context") == "query")

        asymmetric = {"supports_asymmetric": True} if "supports_asymmetric" in _dataclass_fields(utils) else {}

        rag = lightrag.LightRAG(
            working_dir=str(self._working_dir),
            workspace=workspace,
            **storages,
            llm_model_func=complete,
            llm_model_name=self.extraction_model(),
            embedding_func=utils.EmbeddingFunc(embedding_dim=dimensions, func=embed, max_token_size=8192, **asymmetric),
            tokenizer=utils.Tokenizer("offline", OfflineTokenizer()),
            chunk_token_size=CHUNK_TOKENS,
            chunk_overlap_token_size=CHUNK_OVERLAP_TOKENS,
            top_k=config.top_k,
            chunk_top_k=config.chunk_top_k,
            max_graph_nodes=MAX_GRAPH_NODES,
            # One extraction pass: an exchange is short, and a second ("gleaning") pass doubles the cost.
            entity_extract_max_gleaning=0,
            enable_llm_cache=False,
            # Chunks of the matched entities picked by how often they are cited, not by a second vector
            # comparison per chunk (LightRAG's cosine loops are pure Python, on the reply path).
            kg_chunk_pick_method="WEIGHT",
            enable_llm_cache_for_entity_extract=True,
            vector_db_storage_cls_kwargs={"cosine_better_than_threshold": config.cosine_threshold},
        )
        use_batched_reads(rag.chunk_entity_relation_graph)
        await self._initialize_storages(rag)
        _build_global_config_once(rag)
        if self._storage == "files":
            await clear_left_by_a_stop(rag, workspace)
        log.info("[RAG] LightRAG workspace %s opened (%s storages)", workspace, self._storage)
        return rag

    async def _initialize_storages(self, rag: Any) -> None:
        """Open the storages, creating LightRAG's tables where they are missing: in the database of
        `BOT_DATABASE_URL` under an advisory lock, so processes starting together create them one at a time
        (two `CREATE TABLE`s of one name at once fail)."""
        if self._storage != "postgres":
            await rag.initialize_storages()
            return
        with _quiet_table_probes():
            if self._postgres_url is None:
                await rag.initialize_storages()
                return
            asyncpg = importlib.import_module("asyncpg")
            connection = await asyncpg.connect(self._postgres_url, timeout=TABLES_CONNECT_TIMEOUT_SECONDS)
            try:
                await connection.execute("SELECT pg_advisory_lock($1)", TABLES_LOCK_KEY)
                await rag.initialize_storages()
            finally:
                await connection.close()  # and with it the lock

    async def _complete(
        self, prompt: str, system_prompt: str | None, history_messages: list[dict[str, Any]] | None
    ) -> str:
        """LightRAG's model function: extraction, summaries and keywords, with the extraction model."""
        messages: list[dict[str, Any]] = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(history_messages or [])
        messages.append({"role": "user", "content": prompt})
        request = ChatRequest(model=self.extraction_model(), messages=messages, temperature=0, purpose="indexing")
        return (await self._llm.complete(request)).text

    async def _embed(self, texts: list[str], query: bool = False) -> np.ndarray:
        """Vectors of `texts`: a query's as queries (the bundled model keeps the message's vector that
        memory retrieval made a moment before, so the graph's query costs no second embedding)."""
        model, dimensions = self._pinned_embedding()
        embedder = self._embedders.get(model)
        assert embedder is not None
        unique = list(dict.fromkeys(texts))
        if query:
            vectors = [await embedder.embed_query(text) for text in unique]
        else:
            vectors = await embedder.embed(unique)
        if vectors and len(vectors[0]) != dimensions:
            raise RagBackendError(
                f"the embedding model {model} gives {len(vectors[0])} dimensions; "
                f"runtime-config rag.embeddingDimensions says {dimensions}"
            )
        by_text = dict(zip(unique, np.array(vectors, dtype=np.float32), strict=True))
        return np.stack([by_text[text] for text in texts])

    def _pinned_embedding(self) -> tuple[str, int]:
        """The embedder (and its dimensions) of this graph: pinned when the graph is first made."""
        if self._embedding is not None:
            return self._embedding
        config = self._config()
        marker = self._working_dir / EMBEDDER_FILE
        try:
            pinned = json.loads(marker.read_text(encoding="utf-8"))
            self._embedding = (str(pinned["model"]), int(pinned["dimensions"]))
        except FileNotFoundError:
            if any(self._working_dir.glob("**/vdb_*.json")):  # a graph from before the pin
                model = config.embedding_model if config.embedding_model != LOCAL_MODEL else LEGACY_EMBEDDING_MODEL
                self._embedding = (model, config.embedding_dimensions)
            elif config.embedding_model == LOCAL_MODEL:
                self._embedding = (LOCAL_MODEL, LocalEmbedder.dimensions)
            else:
                self._embedding = (config.embedding_model, config.embedding_dimensions)
            self._working_dir.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"model": self._embedding[0], "dimensions": self._embedding[1]}))
        except (ValueError, KeyError, TypeError) as error:
            raise RagBackendError(f"{marker} is unreadable ({error}): fix it or delete rag/ to rebuild") from error
        if self._embedding[0] != config.embedding_model:
            log.warning(
                "[RAG] The graph in %s was built with the embedder %s; rag.embeddingModel %s applies to a new "
                "graph (delete the folder to rebuild)", self._working_dir, self._embedding[0], config.embedding_model,
            )  # fmt: skip
        return self._embedding


def _build_global_config_once(rag: Any) -> None:
    """LightRAG rebuilds its configuration dict for every query and insert (`dataclasses.asdict`, a deep
    copy of every field, on the reply path); nothing in it changes after the instance is made
    (settings that apply live are passed with each call), so it is built once, and each caller gets
    its own top-level copy as before."""
    build = getattr(rag, "_build_global_config", None)
    if not callable(build):
        return
    built = build()
    rag._build_global_config = lambda: dict(built)


def _dataclass_fields(utils: Any) -> set[str]:
    """The fields of LightRAG's `EmbeddingFunc` (older versions lack `supports_asymmetric`)."""
    return set(getattr(utils.EmbeddingFunc, "__dataclass_fields__", {}))


def _release_shared_state() -> None:
    """LightRAG keeps namespaces (KV data, document status) module-wide, keyed by workspace name only:
    release them so the next adapter reads its own files, not what another working folder left."""
    importlib.import_module("lightrag.kg.shared_storage").finalize_share_data()


class _TableProbeFilter(logging.Filter):
    """LightRAG finds a missing table by querying it, and logs the failed query as an error before it creates
    the table: on a new database, a dozen errors that are none."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and "does not exist" in record.getMessage())


@contextlib.contextmanager
def _quiet_table_probes() -> Iterator[None]:
    logger = logging.getLogger("lightrag")
    probe_filter = _TableProbeFilter()
    logger.addFilter(probe_filter)
    try:
        yield
    finally:
        logger.removeFilter(probe_filter)


def lightrag_postgres_environment(url: str) -> dict[str, str | None]:
    """LightRAG's POSTGRES_* variables for the database of a `postgresql://` URL (None: the variable unset).

    LightRAG refuses to start without POSTGRES_PASSWORD: a URL without a password gives PGPASSWORD's value,
    else an empty one (a server that asks for none, as with `trust`)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    user = unquote(parts.username or "") or query.get("user", [""])[0] or getpass.getuser()
    return {
        "POSTGRES_HOST": unquote(parts.hostname or "") or query.get("host", ["localhost"])[0],
        "POSTGRES_PORT": str(parts.port or query.get("port", ["5432"])[0]),
        "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": unquote(parts.password)
        if parts.password is not None
        else os.environ.get("PGPASSWORD", ""),
        "POSTGRES_DATABASE": unquote(parts.path.lstrip("/")) or query.get("dbname", [user])[0],
        "POSTGRES_SSL_MODE": query.get("sslmode", [None])[0],
        "POSTGRES_MAX_CONNECTIONS": str(GRAPH_MAX_CONNECTIONS),
    }


def _use_postgres_environment(variables: dict[str, str | None]) -> None:
    # LightRAG reads its connection from the process environment and nowhere else.
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    password = variables.get("POSTGRES_PASSWORD")
    if password:
        add_secrets([password])


def _check_postgres_environment() -> None:
    # LightRAG puts every workspace into POSTGRES_WORKSPACE when it is set: chats would share one graph.
    if os.environ.get("POSTGRES_WORKSPACE"):
        raise RagBackendError("unset POSTGRES_WORKSPACE: the bot names LightRAG workspaces itself (memory.scope)")
    if not os.environ.get("POSTGRES_DATABASE") or not os.environ.get("POSTGRES_USER"):
        raise RagBackendError("rag.backend postgres needs POSTGRES_HOST, POSTGRES_PORT, POSTGRES_USER, ... set")


async def _drop_unfinished_vectors(rag: Any) -> None:
    """Drop the vectors an insert cut short by the stop left waiting for the embedder, which is stopped
    next: finalizing would otherwise try to embed them and fail. Nothing is lost: a finished insert has
    flushed its own, and the documents of one cut short stay queued and are indexed again at the next start."""
    for name in ("entities_vdb", "relationships_vdb", "chunks_vdb"):
        drop = getattr(getattr(rag, name, None), "drop_pending_index_ops", None)
        if callable(drop):
            await drop()


async def _stop_call_workers(rag: Any) -> None:
    """Stop the worker tasks LightRAG runs its model and embedding calls on (`finalize_storages` leaves
    them running, and one still waiting on a model call would hold up the event loop's shutdown)."""
    wrapped = [getattr(state, "wrapped", None) for state in getattr(rag, "_role_llm_states", {}).values()]
    wrapped += [getattr(rag.embedding_func, "func", None), getattr(rag, "rerank_model_func", None)]
    for function in wrapped:
        shutdown = getattr(function, "shutdown", None)
        if callable(shutdown):
            await asyncio.wait_for(shutdown(graceful=False), WORKER_SHUTDOWN_SECONDS)


def snippets_from_data(data: dict[str, Any]) -> list[RagSnippet]:
    """LightRAG's structured context (`aquery_data`, `/query/data`) as snippets: facts first, then excerpts."""
    snippets: list[RagSnippet] = []
    for entity in data.get("entities") or []:
        name, kind = entity.get("entity_name", ""), entity.get("entity_type", "")
        label = f"{name} ({kind})" if kind and kind != "UNKNOWN" else name
        text = f"{label}: {_one_line(entity.get('description', ''))}"
        snippets.append(RagSnippet("entity", text, _documents_of(entity)))
    for relation in data.get("relationships") or []:
        head = f"{relation.get('src_id', '')} → {relation.get('tgt_id', '')}"
        text = f"{head}: {_one_line(relation.get('description', ''))}"
        snippets.append(RagSnippet("relation", text, _documents_of(relation)))
    for chunk in data.get("chunks") or []:
        if chunk.get("content"):
            snippets.append(RagSnippet("chunk", str(chunk["content"]).strip(), _documents_of(chunk)))
    return snippets


def _documents_of(record: dict[str, Any]) -> tuple[str, ...]:
    """The names of the documents a record of LightRAG's context was drawn from (`file_path`, joined with
    `<SEP>` where several)."""
    return tuple(name for name in dict.fromkeys(str(record.get("file_path") or "").split("<SEP>")) if name)


def _one_line(text: str) -> str:
    return " ".join(str(text).replace("<SEP>", "; ").split())

"""`RagService`: the fourth memory layer: queue exchanges, index them in batches, retrieve, forget.

Writing never touches the reply path: `enqueue` only appends to the durable queue, and the scheduler's
tick (`flush_if_due`) indexes due documents, retrying failures with backoff. A chat's exchanges are
indexed together, packed into documents that fill LightRAG's chunk (`batchTokens`), since each
document chunk costs one extraction call whose fixed instructions outweigh a single exchange: once a
chat's queue fills such a document, `idleFlushSeconds` after the last exchange (the end of a quiet
stretch; until then the facts are in the conversation and today's notes), and every
`flushIntervalSeconds` in any case; all read live. Nothing waits in memory only: the queue is on disk.
Reading (`retrieve`) is bounded by `queryTimeoutSeconds` and never fails the turn: on timeout or error
the reply goes on without `# Relevant Memory`, and the log says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from bot.context.estimator import TokenEstimator
from bot.domain.session import whole_chat_session_id
from bot.rag.backend import GraphView, QueryMode, RagBackend, RagBackendError, RagQuery, RagSnippet
from bot.rag.documents import (
    GLOBAL_RAG_WORKSPACE,
    RagDocument,
    batch_document,
    batches,
    document_id,
    document_text,
    exchanges_in,
    is_exchange,
    rag_workspace_for,
    worth_indexing,
)
from bot.rag.graph_view import merged, ranked_names, with_journal_sources
from bot.rag.keywords import content_words
from bot.rag.store import RagJournal
from bot.rag.tokenizer import OfflineTokenizer
from bot.settings import RagConfig, RuntimeConfig

log = logging.getLogger(__name__)

RELEVANT_MEMORY_HEADER = "# Relevant Memory"
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)
_LABEL = re.compile(r"^\s*(user|assistant)\s*:\s*", re.IGNORECASE)
# An aside in brackets: the memory part follows a relative date with the date it meant ("last Friday
# (5 May 2023)"), which the graph's copy of the words does not have; both sides are compared without.
_ASIDE = re.compile(r"\([^()]*\)")
# A segment shorter than this says too little to call it shown already.
MIN_DEDUP_SEGMENT_CHARS = 12
# An excerpt cut shorter than this is not worth its place.
MIN_EXCERPT_TOKENS = 16
# The memory pack cuts user text to 200 characters; a shown segment matches on this prefix.
DEDUP_PREFIX_CHARS = 150
# Queued documents one flush packs into batches, at most (a backlog drains over several flushes).
MAX_DOCUMENTS_PACKED = 2000
# The backend's own wait for an insert ends at `insertTimeoutSeconds` with the reason it knows ("still
# processing on the server"); the service's, this much later, only stops a backend that does not answer.
INSERT_GRACE_SECONDS = 5.0
# The console reads this many chats' graphs at once (each a few round trips on a server or in a database).
GRAPHS_READ_AT_ONCE = 4
T = TypeVar("T")


@dataclass(frozen=True)
class RagStatus:
    """What `/status` shows about the RAG layer."""

    enabled: bool
    backend: str
    indexed: int
    queued: int
    failed: int
    last_error: str | None
    # The model that extracts the graph (None: a LightRAG server's own).
    extraction_model: str | None = None

    def describe(self) -> str:
        if not self.enabled:
            return "RAG: disabled"
        error = f"; last error: {self.last_error}" if self.last_error else ""
        failed = f", {self.failed} given up" if self.failed else ""
        model = f"; extraction model {self.extraction_model}" if self.extraction_model else ""
        return f"RAG ({self.backend}): {self.indexed} documents indexed, {self.queued} queued{failed}{model}{error}"


@dataclass(frozen=True)
class RetrievedContext:
    """The `# Relevant Memory` section (empty when there is nothing new to show) and why."""

    text: str
    snippets: int
    dropped_as_shown: int
    outcome: str  # ok | empty | skipped | timeout | error


class RagService:
    """The RAG layer's one entry point for the pipeline, the tools, the scheduler and /status."""

    def __init__(
        self,
        store: RagJournal,
        backend: RagBackend,
        config: Callable[[], RuntimeConfig],
        estimator: TokenEstimator,
        extraction_model: Callable[[], str] | None = None,
    ) -> None:
        self._store = store
        self._extraction_model = extraction_model
        self._backend = backend
        self._config = config
        self._estimator = estimator
        self._mutation_lock = asyncio.Lock()
        self.last_error: str | None = None
        self._last_flush = time.monotonic()
        # When the chat has been quiet long enough after the last queued exchange (None: nothing waits).
        self._idle_due_at: float | None = None
        # Tokens of each chat's exchanges queued since its last flush: a full batch is indexed at once.
        self._queued_tokens: dict[str, int] = defaultdict(int)
        self._full_batch_waiting = False
        self._tokenizer = OfflineTokenizer()
        self._warming: asyncio.Task[None] | None = None

    @property
    def store(self) -> RagJournal:
        return self._store

    @property
    def backend(self) -> RagBackend:
        return self._backend

    # -- writing ------------------------------------------------------------------------------------

    async def enqueue(
        self,
        config: RuntimeConfig,
        session_id: str,
        at: datetime,
        user_text: str,
        assistant_text: str,
        message_ids: list[str],
    ) -> RagDocument | None:
        """Put one finished exchange on the durable queue; None when it is not worth indexing."""
        if not worth_indexing(user_text, assistant_text, config.rag):
            log.debug("[RAG] Skipped a short exchange or greeting in %s", session_id)
            return None
        doc = RagDocument(
            id=document_id(session_id, at),
            session_id=session_id,
            rag_workspace=rag_workspace_for(session_id, config),
            text=document_text(session_id, at, user_text, assistant_text),
            created_at=at.isoformat(),
            message_ids=message_ids,
        )
        doc = await self._store.add(doc)
        log.info("[RAG] Queued %s (%d chars)", doc.id, len(doc.text))
        # Debounced: each new exchange pushes the moment back, so a quiet stretch is indexed together.
        self._idle_due_at = time.monotonic() + config.rag.idle_flush_seconds
        self._queued_tokens[session_id] += self._tokenizer.count(doc.text)
        if 0 < config.rag.batch_tokens <= self._queued_tokens[session_id]:
            self._full_batch_waiting = True
        return doc

    async def enqueue_part(
        self, config: RuntimeConfig, session_id: str, doc_id: str, text: str, at: datetime
    ) -> RagDocument:
        """Queue one part of a document sent in a chat, to be indexed at once; an id this chat queued
        before (a restart in the middle of reading) is not queued twice. The same file sent in another chat
        is that chat's own (in its graph, forgotten on its own): it gets the next free id."""
        existing = await self._store.get(doc_id)
        if existing is not None and existing.status != "forgotten" and existing.session_id == session_id:
            if existing.status == "queued":
                self.index_soon()  # still waited for, after a restart
            return existing
        doc = RagDocument(
            id=doc_id,
            session_id=session_id,
            rag_workspace=rag_workspace_for(session_id, config),
            text=text,
            created_at=at.isoformat(),
        )
        doc = await self._store.add(doc)
        self.index_soon()
        return doc

    def index_soon(self) -> None:
        """Index what is queued at the next tick, without waiting for the chat to be quiet: someone waits
        for it (a document's reading)."""
        self._idle_due_at = time.monotonic()

    async def flush_if_due(self) -> int:
        """The scheduler's tick: index once the chat was quiet `idleFlushSeconds` after an exchange, or
        `flushIntervalSeconds` after the last flush, whichever comes first; and a chat's full batches
        as soon as they are full."""
        config = self._config().rag
        now = time.monotonic()
        idle = self._idle_due_at is not None and now >= self._idle_due_at
        if not idle and now - self._last_flush < config.flush_interval_seconds:
            if not self._full_batch_waiting:
                return 0
            self._full_batch_waiting = False
            return await self.flush_all(max_seconds=config.flush_interval_seconds, full_only=True)
        self._idle_due_at = None
        self._full_batch_waiting = False
        self._last_flush = now
        return await self.flush_all(max_seconds=config.flush_interval_seconds)

    async def flush(self, full_only: bool = False) -> int:
        """Index due documents, `batchSize` LightRAG documents at most (each a batch of a chat's
        exchanges, or a part of a document sent in a chat); returns how many queued documents were
        indexed. With `full_only`, a chat's last batch is left queued while it could still grow.
        Failures are retried later."""
        config = self._config().rag
        if not config.enabled:
            return 0
        async with self._mutation_lock:
            await self._delete_left_behind()
            return await self._index_packed(await self._store.due(time.time(), MAX_DOCUMENTS_PACKED), full_only)

    async def _index_packed(self, due: list[RagDocument], full_only: bool) -> int:
        config = self._config().rag
        packed = [
            members
            for members, full in batches(due, config.batch_tokens, self._tokenizer.count)
            if full or not full_only
        ][: config.batch_size]
        chosen = {doc.id for members in packed for doc in members}
        await self._store.release([doc for doc in due if doc.id not in chosen])
        by_workspace: dict[str, list[list[RagDocument]]] = defaultdict(list)
        for members in packed:
            by_workspace[members[0].rag_workspace].append(members)
        indexed = 0
        for workspace, workspace_batches in by_workspace.items():
            indexed += await self._index(workspace, workspace_batches)
        for members in packed:
            for doc in members:
                if doc.status != "queued" and is_exchange(doc):
                    left = self._queued_tokens[doc.session_id] - self._tokenizer.count(doc.text)
                    self._queued_tokens[doc.session_id] = max(0, left)
        return indexed

    async def _index(self, workspace: str, packed: list[list[RagDocument]]) -> int:
        config = self._config().rag
        started = time.monotonic()
        held = {doc.id for doc in await self._store.renew_claims([doc for members in packed for doc in members])}
        # A batch with a member this process no longer holds (forgotten, or another's after a long wait) is
        # left to the next flush, made again from what is queued then.
        await self._store.release(
            [doc for members in packed if not all(doc.id in held for doc in members) for doc in members]
        )
        packed = [members for members in packed if all(doc.id in held for doc in members)]
        if not packed:
            return 0
        documents = [batch_document(members) for members in packed]
        docs = [doc for members in packed for doc in members]
        # Before the insert: once the backend has the text, it may finish it after this wait has run out.
        await self._store.mark_tried(
            {document.id: members for document, members in zip(documents, packed, strict=True)}
        )
        timeout = config.insert_timeout_seconds + INSERT_GRACE_SECONDS
        try:
            backend_ids = await asyncio.wait_for(self._backend.insert(workspace, documents), timeout=timeout)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if isinstance(error, TimeoutError):
                reason = f"the graph's backend did not answer within {timeout:g} s (rag.insertTimeoutSeconds + grace)"
            else:
                reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            self.last_error = reason
            await self._store.mark_failed(docs, reason, config)
            attempts = max(doc.attempts for doc in docs)
            given_up = [doc.id for doc in docs if doc.status == "failed"]
            log.warning(
                "[RAG] Indexing %d documents into %s failed (try %d): %s%s",
                len(docs), workspace, attempts, reason,
                f"; gave up on {', '.join(given_up)}" if given_up else "; will retry with backoff",
            )  # fmt: skip
            # Any forgotten by another process meanwhile: the backend may hold them though this wait failed.
            await self._delete_left_behind()
            return 0
        for document, members in zip(documents, packed, strict=True):
            for doc in members:
                doc.backend_id = backend_ids.get(document.id, document.id)
        forgotten = await self._store.mark_indexed(docs)
        self.last_error = None
        elapsed = time.monotonic() - started
        log.info("[RAG] Indexed %d documents into %s as %d in %.2fs", len(docs), workspace, len(documents), elapsed)
        if forgotten:
            # Forgotten by another process while this one indexed them: out of the graph again at once.
            log.info("[RAG] %d documents were forgotten while being indexed; deleting them again", len(forgotten))
            await self._index_again(await self._delete_from_graph(forgotten, forgotten), {doc.id for doc in forgotten})
            await self._store.forget([doc.id for doc in forgotten])
        return len(docs) - len(forgotten)

    async def flush_all(self, max_seconds: float | None = None, full_only: bool = False) -> int:
        """Flush batch after batch until nothing is due, or `max_seconds` have passed (the scheduler's
        job gives itself one interval, so a backlog drains without one run holding the queue for long)."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        total = 0
        while deadline is None or time.monotonic() < deadline:
            count = await self.flush(full_only)
            if count == 0:
                break
            total += count
        return total

    # -- forgetting ---------------------------------------------------------------------------------

    async def forget_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents from LightRAG and from the queue; returns the ids that were removed.

        The memory tools call this when the user forgets something: `documents_for_messages` finds the
        ids. A document still queued is simply dropped; an indexed one is deleted from the graph, with
        the entities and relations only it supported, and its cached extraction. An exchange indexed
        in a batch takes the batch's document with it: the other exchanges of that batch are indexed
        again at once, without it (whatever fails or does not fit this flush stays queued for the next).
        Every backend document a forgotten exchange was sent in (`tried_as`) is deleted too, queued or
        failed ones' included: an insert whose wait ran out may have finished in the backend all the same.
        """
        found: list[RagDocument] = []
        async with self._mutation_lock:
            for doc_id in doc_ids:
                doc = await self._store.get(doc_id)
                if doc is not None and doc.status != "forgotten":
                    found.append(doc)
            removed = [doc.id for doc in found]
            # The rest of each deleted batch is queued first, so the forget's rewrite of the journal keeps their text.
            requeued = await self._delete_from_graph([doc for doc in found if doc.status == "indexed"], found)
            await self._store.forget(removed)
            await self._index_again(requeued, set(removed))
        if removed:
            log.info("[RAG] Forgot %d documents: %s", len(removed), ", ".join(removed))
        return removed

    async def _delete_from_graph(self, indexed: list[RagDocument], tried: list[RagDocument]) -> list[RagDocument]:
        """Delete the backend documents that carry `indexed` and those `tried` were sent in (each once), and
        queue again the other exchanges indexed in them; returns those."""
        deleted: set[str] = set()
        for doc in indexed:
            backend_id = doc.backend_id or doc.id
            if backend_id not in deleted:
                await self._backend.delete(doc.rag_workspace, [backend_id])
                deleted.add(backend_id)
        names: dict[str, list[str]] = defaultdict(list)
        for doc in tried:
            # A document with a backend id is indexed under the name it was sent in last, which that id
            # deleted above: only the earlier names are looked up (a server is asked for its list of them).
            unknown = doc.tried_as[:-1] if doc.backend_id else doc.tried_as
            names[doc.rag_workspace].extend(name for name in unknown if name not in deleted)
        for workspace, workspace_names in names.items():
            if workspace_names:
                deleted.update(await self._backend.delete_named(workspace, workspace_names, deleted))
        return await self._store.requeue_indexed_in(deleted)

    async def _delete_left_behind(self) -> None:
        """Delete from the graph the forgotten documents a process was sending to it at the time of the forget
        (its insert failed, ran out of time, hung or died: the backend may have taken the text after the forget
        looked for it), then drop their rows; a graph that cannot delete now is tried again once the claim
        `left_behind` made has run out."""
        left = await self._store.left_behind()
        if not left:
            return
        ids = ", ".join(doc.id for doc in left)
        log.info("[RAG] Deleting %d documents forgotten while being sent to the graph: %s", len(left), ids)
        try:
            requeued = await self._delete_from_graph([], left)
        except RagBackendError as error:
            log.warning("[RAG] The graph may still hold %s, forgotten while being indexed: %s", ids, error)
            return
        await self._store.forget([doc.id for doc in left])
        await self._index_again(requeued, {doc.id for doc in left})

    async def _index_again(self, requeued: list[RagDocument], forgotten: set[str]) -> None:
        """Index at once the exchanges queued again after their batch's document was deleted, but the
        forgotten ones (whatever fails or does not fit stays queued for the next flush)."""
        await self._store.release([doc for doc in requeued if doc.id in forgotten])
        requeued = [doc for doc in requeued if doc.id not in forgotten]
        if requeued:
            log.info("[RAG] Indexing again %d exchanges indexed with a forgotten one", len(requeued))
            await self._index_packed(requeued, full_only=False)
            if any(doc.status == "queued" for doc in requeued):
                self.index_soon()

    async def documents_for_messages(self, message_ids: list[str]) -> list[str]:
        """Ids of the documents made from any of these messages."""
        return [doc.id for doc in await self._store.find(message_ids=message_ids)]

    async def documents_for_session(self, session_id: str) -> list[str]:
        return [doc.id for doc in await self._store.find(session_id=session_id)]

    async def move_chat(self, old_session_id: str, new_session_id: str) -> int:
        """The chat `old_session_id` lives on as `new_session_id` (a group upgraded to a supergroup): its documents
        are recorded as the new chat's, each left in the graph that holds it, which the new chat's retrievals read
        beside its own (`RagJournal.graphs_read`); how many documents. A LightRAG server keeps one graph, the
        embedded backend one per workspace: neither moves anything between graphs."""
        async with self._mutation_lock:
            moved = await self._store.move_session(old_session_id, new_session_id)
            self._queued_tokens[new_session_id] += self._queued_tokens.pop(old_session_id, 0)
        return moved

    # -- reading ------------------------------------------------------------------------------------

    async def retrieve(
        self,
        config: RuntimeConfig,
        session_id: str,
        query_text: str,
        shown: Callable[[], str],
        share_tokens: int | None = None,
    ) -> RetrievedContext:
        """`# Relevant Memory` for `query_text`, without what `shown()` already says (the memory part and the
        live conversation: made only when there are snippets to check against it), within
        `rag.maxContextTokens` and `share_tokens` (what the turn's context plan gives RAG)."""
        rag = config.rag
        workspace = rag_workspace_for(session_id, config)
        max_tokens = rag.max_context_tokens if share_tokens is None else min(rag.max_context_tokens, share_tokens)
        if not rag.enabled or max_tokens <= 0 or not query_text.strip():
            return RetrievedContext("", 0, 0, "skipped")
        graphs = await self._graphs_read(workspace, session_id)
        if not graphs:
            return RetrievedContext("", 0, 0, "empty")
        query = RagQuery(
            query_text, rag.query_mode, rag.top_k, chunks_to_read(rag, rag.chunk_top_k, max_tokens), max_tokens
        )
        started = time.monotonic()
        try:
            snippets = await asyncio.wait_for(self._query(graphs, query), timeout=rag.query_timeout_seconds)
        except TimeoutError:
            log.warning(
                "[RAG] Retrieval timed out after %.1fs (%s mode); answering without Relevant Memory",
                rag.query_timeout_seconds, rag.query_mode,
            )  # fmt: skip
            return RetrievedContext("", 0, 0, "timeout")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("[RAG] Retrieval failed (%s); answering without Relevant Memory", error or type(error).__name__)
            return RetrievedContext("", 0, 0, "error")
        snippets = per_exchange(snippets, query_text)
        fresh = snippets
        if snippets:
            # Once, not once per snippet (a few ms with a full memory part and a long conversation).
            shown_words = normalized(_ASIDE.sub(" ", shown()))
            fresh = [snippet for snippet in snippets if not already_shown(snippet.text, shown_words)]
        text = self.render(fresh, max_tokens, RELEVANT_MEMORY_HEADER)
        log.info(
            "[RAG] Retrieved %d snippets (%d already in memory) in %.0f ms, %s mode: %d chars",
            len(snippets), len(snippets) - len(fresh), (time.monotonic() - started) * 1000, rag.query_mode, len(text),
        )  # fmt: skip
        return RetrievedContext(text, len(fresh), len(snippets) - len(fresh), "ok" if text else "empty")

    async def search(
        self, config: RuntimeConfig, session_id: str, query_text: str, mode: QueryMode | None = None
    ) -> str:
        """Deeper retrieval for the `rag_query` tool: a bigger budget, the tool's timeout; errors raise."""
        rag = config.rag
        workspace = rag_workspace_for(session_id, config)
        graphs = await self._graphs_read(workspace, session_id)
        if not graphs:
            return ""
        chosen = mode or rag.query_mode
        chunks = chunks_to_read(rag, rag.chunk_top_k * 2, rag.tool_max_tokens)
        query = RagQuery(query_text, chosen, rag.top_k * 2, chunks, rag.tool_max_tokens)
        return self.render(await self._query(graphs, query), rag.tool_max_tokens, "")

    async def _graphs_read(self, workspace: str, session_id: str) -> list[str]:
        """The graphs a retrieval of the chat reads: its own (`workspace`), and those holding what it had under an
        earlier id (`move_chat`), a chat's own each. Never the owner's (`global`) for another chat's sake: a chat
        whose earlier documents went there (under `memory.ownerMemoryEverywhere`) does not read the owner's
        memory through them."""
        graphs = await self._store.graphs_read(workspace, whole_chat_session_id(session_id))
        return [graph for graph in graphs if graph == workspace or graph != GLOBAL_RAG_WORKSPACE]

    async def _query(self, graphs: list[str], query: RagQuery) -> list[RagSnippet]:
        """What `graphs` (the chat's own first) answer to `query`: each asked at once, their snippets in that
        order; a backend that keeps one graph for every workspace is asked once."""
        if not self._backend.keeps_workspaces_apart:
            return await self._drawn_from(graphs, await self._backend.query(graphs[0], query))
        answers = await asyncio.gather(*(self._backend.query(graph, query) for graph in graphs))
        return [snippet for answer in answers for snippet in answer]

    async def _drawn_from(self, graphs: list[str], snippets: list[RagSnippet]) -> list[RagSnippet]:
        """`snippets` drawn from the documents of `graphs` (the chat's). A backend that keeps one graph for every
        workspace (a LightRAG server) answers from every chat's: a snippet is kept only when every document it
        names is one the journal indexed into one of `graphs`, so nothing said in one chat is recalled in another
        (whose memory it is not: a group, another user, under `memory.scope: chat` any other chat); one that
        names none, or a document the bot did not send, is left out too."""
        if not snippets:
            return snippets
        own = {name for graph in graphs for doc in await self._store.indexed_in(graph) for name in doc.names()}
        kept = [snippet for snippet in snippets if snippet.documents and own.issuperset(snippet.documents)]
        if len(kept) < len(snippets):
            log.info(
                "[RAG] Left out %d of %d snippets drawn from documents of other graphs than %s (the server keeps one)",
                len(snippets) - len(kept), len(snippets), ", ".join(graphs),
            )  # fmt: skip
        return kept

    async def graph(self, max_entities: int, around: str | None = None) -> GraphView:
        """Every chat's knowledge graph drawn as one (the console's page): the `max_entities` most connected
        entities, or with `around` that entity and the `max_entities` nearest it in any chat's graph (an empty view
        when none holds it), each with the text it was drawn from (the backend's chunks, else the journal's
        documents). Raises `RagBackendError` when the backend cannot answer."""
        views = await self._each_graph(lambda workspace: self._backend.graph(workspace, max_entities, around))
        view = merged(views, max_entities, around)
        if any(not entity.sources and entity.documents for entity in view.entities):
            view = with_journal_sources(view, await self._store.live())
        return view

    async def search_entities(self, query: str, limit: int) -> list[str]:
        """The names of the entities of every chat's graph that contain `query` (case aside), at most `limit`, the
        best first. Raises `RagBackendError` when the backend cannot answer."""
        found = await self._each_graph(lambda workspace: self._backend.search_entities(workspace, query, limit))
        return ranked_names(query, found, limit)

    async def _each_graph(self, read: Callable[[str], Awaitable[T]]) -> list[T]:
        """`read` of every chat's graph, `GRAPHS_READ_AT_ONCE` at a time (a server's or a database's round trips
        overlap), in the journal's order; once on a backend that keeps one graph for every chat (a server)."""
        workspaces = await self._store.indexed_workspaces()
        if not self._backend.keeps_workspaces_apart:
            workspaces = workspaces[:1]
        gate = asyncio.Semaphore(GRAPHS_READ_AT_ONCE)

        async def gated(workspace: str) -> T:
            async with gate:
                return await read(workspace)

        return list(await asyncio.gather(*(gated(workspace) for workspace in workspaces)))

    def render(self, snippets: list[RagSnippet], max_tokens: int, header: str) -> str:
        """Facts, then excerpts of past exchanges, added while they fit in `max_tokens`."""
        facts = [s for s in snippets if s.kind in ("entity", "relation")]
        excerpts = [s for s in snippets if s.kind not in ("entity", "relation")]
        lines: list[str] = [header, "From past conversations; it may be outdated."] if header else []
        used = self._estimator.text("\n".join(lines))
        sections: list[tuple[str, list[RagSnippet]]] = [("## Facts", facts), ("## Past Exchanges", excerpts)]
        added = 0
        for title, group in sections:
            title_added = False
            for snippet in group:
                entry = "- " + snippet.text.replace("\n", "\n  ")
                title_cost = 0 if title_added else self._estimator.text(title) + 1
                cost = self._estimator.text(entry) + title_cost + 1
                if used + cost > max_tokens:
                    # The first excerpt that does not fit is cut to the room left, when that is worth it.
                    room = max_tokens - used - title_cost - 2
                    if room < MIN_EXCERPT_TOKENS:
                        continue
                    entry = entry[: int(room * self._estimator.ratio_for(None)) - 1].rstrip() + "…"
                    cost = self._estimator.text(entry) + title_cost + 1
                if not title_added:
                    lines.append(title)
                    title_added = True
                lines.append(entry)
                used += cost
                added += 1
        return "\n".join(lines) if added else ""

    async def status(self) -> RagStatus:
        config = self._config().rag
        counts = await self._store.counts()
        model = self._extraction_model() if self._extraction_model is not None else None
        return RagStatus(
            config.enabled, self._backend.name, counts["indexed"], counts["queued"], counts["failed"], self.last_error,
            model,
        )  # fmt: skip

    def warm_up(self) -> asyncio.Task[None] | None:
        """At start, in the background: open every graph that holds documents, so the first message
        after a start does not wait for LightRAG's import and files (a second or more, which could
        exceed `queryTimeoutSeconds` and leave that reply without `# Relevant Memory`). Returns the
        task (the same one when called again); None when RAG is off."""
        if self._config().rag.enabled and self._warming is None:
            self._warming = asyncio.get_running_loop().create_task(self._open_graphs(), name="rag warm-up")
        return self._warming

    async def _open_graphs(self) -> None:
        started = time.monotonic()
        try:
            if (await self._store.counts())["queued"] and self._idle_due_at is None:
                self._idle_due_at = started  # what a stop left in the queue: indexed at the first tick
            workspaces = await self._store.indexed_workspaces()
            for workspace in workspaces:
                await self._backend.open(workspace)
        except Exception as error:  # the first query opens it instead, and says what is wrong
            log.warning("[RAG] Could not open the knowledge graph at start: %s", error or type(error).__name__)
            return
        if workspaces:
            log.info("[RAG] Opened %d graphs in %.1fs", len(workspaces), time.monotonic() - started)

    async def close(self) -> None:
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warming
        await self._backend.close()


def chunks_to_read(rag: RagConfig, wanted: int, max_tokens: int) -> int:
    """How many chunks to ask LightRAG for: `wanted`, or fewer when chunks hold batches of exchanges (up
    to `batchTokens` each): a few of those fill `max_tokens`, and LightRAG counts the tokens of every
    chunk it reads, which is most of a query's time when they are big."""
    if rag.batch_tokens <= 0:
        return wanted
    return max(1, min(wanted, max_tokens // rag.batch_tokens + 2))


def per_exchange(snippets: list[RagSnippet], query_text: str) -> list[RagSnippet]:
    """Excerpts of batch documents as their exchanges: of each, the exchanges that share a word with the
    query, most shared first (all of them, in order, when none does), so the budget goes to the
    exchange that answers, and one already shown is left out alone."""
    words = {word for word in normalized(" ".join(content_words(query_text))).split() if len(word) > 2}
    expanded: list[RagSnippet] = []
    for snippet in snippets:
        parts = exchanges_in(snippet.text) if snippet.kind == "chunk" else [snippet.text]
        if len(parts) == 1:
            expanded.append(snippet)
            continue
        shared = [len(words.intersection(normalized(part).split())) for part in parts]
        ranked = sorted((index for index in range(len(parts)) if shared[index]), key=lambda index: -shared[index])
        expanded.extend(
            RagSnippet("chunk", parts[index].strip(), snippet.documents) for index in ranked or range(len(parts))
        )
    return expanded


def normalized(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.lower()).split())


def already_shown(snippet: str, shown_words: str) -> bool:
    """Whether everything a snippet says is already in the memory part (as a daily note, an item...),
    given as `normalized` with its asides in brackets taken out.

    A snippet is cut into segments (lines, and `User: ... | Assistant: ...` halves); it is shown when
    each segment long enough to mean something appears, by its first words, in the memory text.
    """
    if not shown_words:
        return False
    segments = []
    for line in snippet.replace(" | ", "\n").splitlines():
        if line.lower().startswith("conversation in chat "):
            continue  # the document's date-and-chat header, never in the memory pack as such
        segment = normalized(_ASIDE.sub(" ", _LABEL.sub("", line)))
        if len(segment) >= MIN_DEDUP_SEGMENT_CHARS:
            segments.append(
                segment[:DEDUP_PREFIX_CHARS].rsplit(" ", 1)[0] if len(segment) > DEDUP_PREFIX_CHARS else segment
            )
    return bool(segments) and all(segment in shown_words for segment in segments)

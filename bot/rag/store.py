"""The RAG layer's journal: the durable indexing queue and the record of every indexed document.

`RagJournal` is what the service asks of it. `RagDocumentStore` keeps it in the workspace's files, one
process's; `bot.rag.journal_table.RagJournalTable` in PostgreSQL, shared by every process of the database.

The files' journal is one append-only JSONL file, `workspace/rag/documents.jsonl`: each line is the
whole record of one document at one moment, and the last line for an id wins. An exchange is appended
(fsynced) before anything else happens to it, so a crash at any moment loses nothing: on start the
journal is replayed and whatever was still `queued` is indexed by the next flush. Indexed documents keep
their origin (session, message ids) so forgetting a memory can find them; an exchange indexed in a batch
with others keeps its text too, so that forgetting one of them can index the rest again. The journal is
rewritten atomically when it has grown well past the live records, and at once after a forget, so
forgotten text does not linger on disk.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from bot.rag.documents import RagDocument
from bot.settings import RagConfig
from bot.storage.files import append_lines, write_atomic
from bot.storage.jsonl import dumps_line, read_jsonl_sync

log = logging.getLogger(__name__)

# The journal is compacted once it holds this many lines more than twice the live records.
COMPACTION_SLACK_LINES = 500


def replay(docs: dict[str, RagDocument], doc: RagDocument) -> None:
    """Take one line of the journal into `docs`: the last line of an id wins, with the text of an earlier
    one when it has none (a change of state is written without the text)."""
    previous = docs.get(doc.id)
    if previous is not None and not doc.text:
        doc.text = previous.text
    docs[doc.id] = doc


def count_failure(doc: RagDocument, error: str, config: RagConfig) -> RagDocument:
    """`doc` with one more failed try: its next try later (the wait doubling, up to the longest), and set
    aside (`failed`) after `maxAttempts`."""
    doc.attempts += 1
    doc.last_error = error[:500]
    backoff = min(config.retry_backoff_seconds * 2 ** (doc.attempts - 1), config.max_retry_backoff_seconds)
    doc.next_attempt_at = time.time() + backoff
    if doc.attempts >= config.max_attempts:
        doc.status = "failed"
    return doc


class RagJournal(Protocol):
    """Documents by id with their state: `queued`, `indexed`, `failed` (given up) or `forgotten`.

    A document handed out by `due` or `requeue_indexed_in` is the caller's to index: with several
    processes sharing one journal, it is claimed for this process alone until `mark_indexed`,
    `mark_failed` or `release` lets go of it. A failed write raises `OSError`."""

    async def add(self, doc: RagDocument) -> RagDocument:
        """Queue a new document durably; an id already taken gets a `_2`, `_3` ... suffix."""
        ...

    async def due(self, now: float, limit: int) -> list[RagDocument]:
        """Queued documents whose retry time has come, oldest first, claimed for this process."""
        ...

    async def left_behind(self) -> list[RagDocument]:
        """Forgotten documents whose rows were kept because a process was sending them to the graph then (it
        failed, ran out of time, hung or died), claimed for this process: the graph may hold them under the
        names they were sent in (`tried_as`); once those are deleted, `forget` drops the rows."""
        ...

    async def renew_claims(self, docs: list[RagDocument]) -> list[RagDocument]:
        """The documents of `docs` still claimed by this process (still queued), each claim made to last
        one more insert; called just before they go to the backend."""
        ...

    async def release(self, docs: Iterable[RagDocument]) -> None:
        """Let go of claimed documents left out of this flush: they stay queued for the next."""
        ...

    async def mark_tried(self, tried: Mapping[str, list[RagDocument]]) -> None:
        """Record durably, before an insert, the name of each backend document with the documents sent in
        it (their `tried_as`), so a forget reaches that backend document even if the insert's wait runs out."""
        ...

    async def mark_indexed(self, indexed: Iterable[RagDocument]) -> list[RagDocument]:
        """Record the documents indexed (with their `backend_id`); returns those forgotten while they were
        being indexed (by another process), whose backend documents must be deleted again."""
        ...

    async def mark_failed(self, failed: Iterable[RagDocument], error: str, config: RagConfig) -> None:
        """Count a failed try; the next waits longer (doubling), and after `maxAttempts` the document is set aside."""
        ...

    async def forget(self, doc_ids: Iterable[str]) -> list[RagDocument]:
        """Mark documents forgotten, their text removed at once; returns the ones known."""
        ...

    async def requeue_indexed_in(self, backend_ids: Iterable[str]) -> list[RagDocument]:
        """Queue again (claimed for this process) the indexed documents that went into any of these backend
        documents (the rest of a batch whose document was deleted); returns them."""
        ...

    async def get(self, doc_id: str) -> RagDocument | None: ...

    async def statuses(self, doc_ids: list[str]) -> dict[str, str]:
        """The state of each of `doc_ids` that is not forgotten, in one read (a document's reading follows
        its parts so)."""
        ...

    async def find(self, *, message_ids: Iterable[str] = (), session_id: str | None = None) -> list[RagDocument]:
        """Live documents that carry any of `message_ids`, or (with `session_id`) all of one chat's."""
        ...

    async def live(self) -> list[RagDocument]:
        """Every document not forgotten, oldest first (the console lists them)."""
        ...

    async def counts(self) -> Counter[str]: ...

    async def indexed_workspaces(self) -> list[str]:
        """The LightRAG workspaces that hold at least one indexed document."""
        ...

    async def graphs_read(self, rag_workspace: str, session_id: str) -> list[str]:
        """The LightRAG workspaces a retrieval for the chat `session_id` (its whole chat's) reads: `rag_workspace`,
        its own, when it holds an indexed document, then every other holding an indexed document of the chat (one
        the chat had under an earlier id, `move_session`)."""
        ...

    async def move_session(self, old_session_id: str, new_session_id: str) -> int:
        """Record every document of the chat `old_session_id` as the chat `new_session_id`'s (its id changed), each
        left in the LightRAG workspace that holds it; how many."""
        ...

    async def indexed_in(self, rag_workspace: str) -> list[RagDocument]:
        """The documents indexed into `rag_workspace` (a retrieval on a backend that keeps one graph for every
        workspace keeps what was drawn from these)."""
        ...


class RagDocumentStore:
    """The journal in `workspace/rag/documents.jsonl`, one process's: it claims nothing, since the
    service's lock already runs one flush or forget at a time (nothing is forgotten mid-insert)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._docs: dict[str, RagDocument] | None = None
        # The workspaces holding an indexed document, and those holding each chat's: read before every retrieval,
        # made again after a change.
        self._graphs: tuple[set[str], dict[str, set[str]]] | None = None
        self._lines = 0
        self._lock = asyncio.Lock()
        self._load_lock = asyncio.Lock()

    @property
    def path(self) -> Path:
        return self._path

    async def _loaded(self) -> dict[str, RagDocument]:
        if self._docs is None:
            async with self._load_lock:  # one read, however many chats ask at once
                if self._docs is None:
                    self._load(await asyncio.to_thread(read_jsonl_sync, self._path))
        assert self._docs is not None
        return self._docs

    def _load(self, records: list[dict[str, Any]]) -> None:
        docs: dict[str, RagDocument] = {}
        for record in records:
            try:
                doc = RagDocument.from_json(record)
            except (KeyError, TypeError, ValueError) as error:
                log.warning("[RAG] Skipped a bad line of %s: %s", self._path, error)
                continue
            replay(docs, doc)
        self._docs = docs
        self._lines = len(records)
        queued = sum(1 for d in docs.values() if d.status == "queued")
        if queued:
            log.info("[RAG] %d exchanges waiting in the indexing queue from before", queued)

    async def add(self, doc: RagDocument) -> RagDocument:
        """Queue a new document durably; an id already taken gets a `_2`, `_3` ... suffix."""
        async with self._lock:
            docs = await self._loaded()
            base, suffix = doc.id, 2
            while doc.id in docs:
                doc.id = f"{base}_{suffix}"
                suffix += 1
            await self._append([doc], with_text=True)
            docs[doc.id] = doc
            return doc

    async def due(self, now: float, limit: int) -> list[RagDocument]:
        """Queued documents whose retry time has come, oldest first."""
        docs = await self._loaded()
        ready = [d for d in docs.values() if d.status == "queued" and d.next_attempt_at <= now]
        return ready[:limit]

    async def left_behind(self) -> list[RagDocument]:
        """None: one process owns the file, and a forget waits for its inserts (the service's lock)."""
        return []

    async def renew_claims(self, docs: list[RagDocument]) -> list[RagDocument]:
        return list(docs)

    async def release(self, docs: Iterable[RagDocument]) -> None:
        return None

    async def mark_tried(self, tried: Mapping[str, list[RagDocument]]) -> None:
        async with self._lock:
            changed = {id(doc): doc for name, docs in tried.items() for doc in docs if doc.note_tried(name)}
            await self._append(list(changed.values()), with_text=False)

    async def mark_indexed(self, indexed: Iterable[RagDocument]) -> list[RagDocument]:
        async with self._lock:
            changed = []
            for doc in indexed:
                doc.status, doc.last_error = "indexed", None
                changed.append(doc)
            await self._append(changed, with_text=False)
            await self._maybe_compact()
            return []

    async def mark_failed(self, failed: Iterable[RagDocument], error: str, config: RagConfig) -> None:
        """Count a failed try; the next waits longer (doubling), and after `maxAttempts` the document is set aside."""
        async with self._lock:
            changed = [count_failure(doc, error, config) for doc in failed]
            await self._append(changed, with_text=False)

    async def forget(self, doc_ids: Iterable[str]) -> list[RagDocument]:
        """Mark documents forgotten and rewrite the journal without their text; returns the ones known."""
        async with self._lock:
            docs = await self._loaded()
            forgotten = []
            for doc_id in doc_ids:
                doc = docs.get(doc_id)
                if doc is not None and doc.status != "forgotten":
                    doc.status, doc.text = "forgotten", ""
                    forgotten.append(doc)
            if forgotten:
                self._graphs = None
                await self._compact()
            return forgotten

    async def requeue_indexed_in(self, backend_ids: Iterable[str]) -> list[RagDocument]:
        """Queue again the indexed documents that went into any of these backend documents (the rest
        of a batch whose document was deleted); returns them."""
        wanted = set(backend_ids)
        if not wanted:
            return []
        async with self._lock:
            docs = await self._loaded()
            requeued = [doc for doc in docs.values() if doc.status == "indexed" and doc.backend_id in wanted]
            for doc in requeued:
                doc.status, doc.backend_id, doc.attempts, doc.next_attempt_at = "queued", None, 0, 0.0
            await self._append(requeued, with_text=True)
            return requeued

    async def get(self, doc_id: str) -> RagDocument | None:
        return (await self._loaded()).get(doc_id)

    async def statuses(self, doc_ids: list[str]) -> dict[str, str]:
        docs = await self._loaded()
        return {doc_id: doc.status for doc_id in doc_ids if (doc := docs.get(doc_id)) and doc.status != "forgotten"}

    async def find(self, *, message_ids: Iterable[str] = (), session_id: str | None = None) -> list[RagDocument]:
        """Live documents that carry any of `message_ids`, or (with `session_id`) all of one chat's."""
        wanted = set(message_ids)
        return [
            doc
            for doc in (await self._loaded()).values()
            if doc.status != "forgotten"
            and ((wanted and wanted.intersection(doc.message_ids)) or (session_id and doc.session_id == session_id))
        ]

    async def live(self) -> list[RagDocument]:
        """Every document not forgotten, oldest first (the console lists them)."""
        return sorted(
            (doc for doc in (await self._loaded()).values() if doc.status != "forgotten"), key=lambda d: d.created_at
        )

    async def counts(self) -> Counter[str]:
        return Counter(doc.status for doc in (await self._loaded()).values())

    async def indexed_workspaces(self) -> list[str]:
        """The LightRAG workspaces that hold at least one indexed document."""
        docs = await self._loaded()
        return sorted({doc.rag_workspace for doc in docs.values() if doc.status == "indexed"})

    async def graphs_read(self, rag_workspace: str, session_id: str) -> list[str]:
        if self._graphs is None:
            indexed = [doc for doc in (await self._loaded()).values() if doc.status == "indexed"]
            of_chat: dict[str, set[str]] = defaultdict(set)
            for doc in indexed:
                of_chat[doc.session_id].add(doc.rag_workspace)
            self._graphs = {doc.rag_workspace for doc in indexed}, of_chat
        holding, of_chat = self._graphs
        own = [rag_workspace] if rag_workspace in holding else []
        return own + sorted(of_chat.get(session_id, set()) - {rag_workspace})

    async def move_session(self, old_session_id: str, new_session_id: str) -> int:
        async with self._lock:
            moved = [doc for doc in (await self._loaded()).values() if doc.session_id == old_session_id]
            for doc in moved:
                doc.session_id = new_session_id
            await self._append(moved, with_text=False)
            return len(moved)

    async def indexed_in(self, rag_workspace: str) -> list[RagDocument]:
        docs = await self._loaded()
        return [doc for doc in docs.values() if doc.status == "indexed" and doc.rag_workspace == rag_workspace]

    async def _append(self, docs: list[RagDocument], *, with_text: bool) -> None:
        self._graphs = None
        if docs:
            await append_lines(self._path, [dumps_line(doc.to_json(with_text)) for doc in docs])
            self._lines += len(docs)

    async def _maybe_compact(self) -> None:
        docs = await self._loaded()
        if self._lines > 2 * len(docs) + COMPACTION_SLACK_LINES:
            await self._compact()

    async def _compact(self) -> None:
        # Indexed documents need no text here any more (the backend has it), unless indexed in a batch;
        # queued ones keep theirs.
        docs = await self._loaded()
        live = [doc for doc in docs.values() if doc.status != "forgotten"]
        shared = Counter(doc.backend_id or doc.id for doc in live if doc.status == "indexed")
        lines = [
            dumps_line(doc.to_json(with_text=doc.status != "indexed" or shared[doc.backend_id or doc.id] > 1)) + "\n"
            for doc in live
        ]
        await write_atomic(self._path, "".join(lines).encode("utf-8", "backslashreplace"))
        for doc in list(docs.values()):
            if doc.status == "forgotten":
                del docs[doc.id]
        self._lines = len(live)

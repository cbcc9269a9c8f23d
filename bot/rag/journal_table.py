"""`RagJournalTable`: the RAG layer's journal in PostgreSQL (`rag_documents`), with `BOT_DATABASE_URL`.

Every process of the database sees every document: a forget answered by one finds what another indexed,
`/status` and the console count them all, and what a process left queued when it died is indexed by
another. One row per document id, with its state, its origin (session, message ids, backend id) and its
text while it is needed: a queued document's, and an indexed one's only while it shares its backend
document with others (a batch), so that forgetting one of them can index the rest again; a forgotten
document's text is removed at once.

A queued document is indexed by one process: `due` claims rows (`FOR UPDATE SKIP LOCKED`) for this
process until `claim_until`, and each insert renews the claim first. A claim lasts twice
`rag.insertTimeoutSeconds` (the insert it is renewed for takes that long at most, the journal's writes
around it far less): the claims of a process that hangs are taken by another once that time has passed,
and those of a process that is gone (its presence lock free: it died, or stopped mid-insert) at once. A
document forgotten while another process indexes it stays as a row without text (`forgotten`, still
claimed) until that process records its insert and deletes it from the graph again; if the insert fails
instead, or the process hangs or dies, the row stays until a flush (`left_behind`) has deleted what the
graph holds under the names it was sent in (`tried_as`).

`bot migrate` copies `rag/documents.jsonl` into the table (`copy_journal_file`), `bot export` writes the
table out as that file (`write_journal_file`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bot.database.connection import Database, is_gone
from bot.rag.documents import RagDocument
from bot.rag.store import count_failure, replay
from bot.settings import RagConfig
from bot.storage.files import read_text_sync
from bot.storage.jsonl import CopiedRecords, parse_numbered, write_records

log = logging.getLogger(__name__)

# How many insert timeouts a claim lasts.
CLAIM_TIMEOUTS = 2.0

_COLUMNS = (
    "id, session_id, rag_workspace, text, created_at, message_ids, status, attempts, next_attempt_at, "
    "last_error, backend_id, tried_as"
)
_INSERT = f"INSERT INTO rag_documents ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
# The text of an indexed document is dropped once no other indexed document shares its backend document
# (those of `$1`, or every one with NULL).
_DROP_TEXT_NOT_NEEDED = (
    "UPDATE rag_documents AS d SET text = '' WHERE d.status = 'indexed' AND d.text <> ''"
    " AND ($1::text[] IS NULL OR coalesce(d.backend_id, d.id) = ANY($1::text[]))"
    " AND NOT EXISTS (SELECT 1 FROM rag_documents AS o WHERE o.id <> d.id AND o.status = 'indexed'"
    " AND coalesce(o.backend_id, o.id) = coalesce(d.backend_id, d.id))"
)


class RagJournalTable:
    """The `rag_documents` table, shared by every process of the database (see the module's docstring)."""

    def __init__(self, database: Database, config: Callable[[], RagConfig]) -> None:
        self._database = database
        self._config = config

    @property
    def _owner(self) -> str:
        return self._database.process_id

    def _lease_seconds(self) -> float:
        return CLAIM_TIMEOUTS * self._config().insert_timeout_seconds

    async def add(self, doc: RagDocument) -> RagDocument:
        base, suffix = doc.id, 2
        async with self._database.transaction() as connection:
            # The id's key decides between processes adding at once: the second waits, then takes the next suffix.
            while (
                await connection.fetchval(_INSERT + " ON CONFLICT (id) DO NOTHING RETURNING id", *_values(doc)) is None
            ):
                doc.id = f"{base}_{suffix}"
                suffix += 1
        return doc

    async def due(self, now: float, limit: int) -> list[RagDocument]:
        return await self._claim("status = 'queued' AND next_attempt_at <= $3", "LIMIT $4", now, limit)

    async def left_behind(self) -> list[RagDocument]:
        return await self._claim("status = 'forgotten'", "")

    async def _claim(self, which: str, limit: str, *arguments: object) -> list[RagDocument]:
        """Claim for this process, oldest first, the rows `which` selects whose claim is free or has run out
        (a gone process's ends now); `which` and `limit` take their parameters from $3 on."""
        async with self._database.transaction() as connection:
            await self._end_claims_of_gone_processes(connection)
            rows = await connection.fetch(
                f"WITH picked AS (SELECT id FROM rag_documents WHERE {which}"
                f" AND (claim_until IS NULL OR claim_until < now()) ORDER BY position {limit} FOR UPDATE SKIP LOCKED)"
                " UPDATE rag_documents AS d SET claimed_by = $1, claim_until = now() + make_interval(secs => $2)"
                f" FROM picked WHERE d.id = picked.id RETURNING d.position, {_qualified('d')}",
                self._owner, self._lease_seconds(), *arguments,
            )  # fmt: skip
        return _in_order(rows)

    async def _end_claims_of_gone_processes(self, connection: Any) -> None:
        """Let the claims of a process that is gone (its presence lock is free) run out now."""
        rows = await connection.fetch(
            "SELECT DISTINCT claimed_by FROM rag_documents WHERE claimed_by IS NOT NULL AND claimed_by <> $1"
            " AND claim_until >= now()",
            self._owner,
        )
        for row in rows:
            owner = str(row["claimed_by"])
            if await is_gone(connection, owner):
                ended = await connection.fetch(
                    "UPDATE rag_documents SET claim_until = now() - interval '1 microsecond'"
                    " WHERE claimed_by = $1 RETURNING id",
                    owner,
                )  # fmt: skip
                log.info("[RAG] Taking over %d documents claimed by a process that is gone", len(ended))

    async def renew_claims(self, docs: list[RagDocument]) -> list[RagDocument]:
        if not docs:
            return []
        rows = await self._database.fetch(
            "UPDATE rag_documents SET claim_until = now() + make_interval(secs => $3)"
            " WHERE id = ANY($1::text[]) AND claimed_by = $2 AND status = 'queued' RETURNING id",
            [doc.id for doc in docs], self._owner, self._lease_seconds(),
        )  # fmt: skip
        held = {str(row["id"]) for row in rows}
        return [doc for doc in docs if doc.id in held]

    async def release(self, docs: Iterable[RagDocument]) -> None:
        ids = [doc.id for doc in docs]
        if not ids:
            return
        async with self._database.transaction() as connection:
            await _let_go(connection, ids, self._owner)

    async def mark_tried(self, tried: Mapping[str, list[RagDocument]]) -> None:
        rows = [([doc.id for doc in docs], name) for name, docs in tried.items() if docs]
        if not rows:
            return
        # Whatever row holds the id, claimed or not: a forget by another process reads the name from it.
        async with self._database.transaction() as connection:
            await connection.executemany(
                "UPDATE rag_documents SET tried_as = array_append(array_remove(tried_as, $2), $2)"
                " WHERE id = ANY($1::text[]) AND tried_as[cardinality(tried_as)] IS DISTINCT FROM $2",
                rows,
            )
        for name, docs in tried.items():
            for doc in docs:
                doc.note_tried(name)

    async def mark_indexed(self, indexed: Iterable[RagDocument]) -> list[RagDocument]:
        docs = list(indexed)
        if not docs:
            return []
        ids = [doc.id for doc in docs]
        async with self._database.transaction() as connection:
            rows = await connection.fetch(
                "UPDATE rag_documents AS d SET status = 'indexed', last_error = NULL, backend_id = t.backend_id,"
                " claimed_by = NULL, claim_until = NULL FROM unnest($1::text[], $2::text[]) AS t(id, backend_id)"
                " WHERE d.id = t.id AND d.claimed_by = $3 AND d.status = 'queued' RETURNING d.id",
                ids, [doc.backend_id for doc in docs], self._owner,
            )  # fmt: skip
            marked = {str(row["id"]) for row in rows}
            unmarked = [doc_id for doc_id in ids if doc_id not in marked]
            still_there: set[str] = set()
            if unmarked:
                # Forgotten meanwhile (its row left without text for this process, or deleted once this claim had
                # run out), or taken by another process after this claim ran out (that one indexes it).
                await _let_go(connection, unmarked, self._owner)
                found = await connection.fetch(
                    "SELECT id FROM rag_documents WHERE id = ANY($1::text[]) AND status <> 'forgotten'", unmarked
                )
                still_there = {str(row["id"]) for row in found}
            forgotten = [doc for doc in docs if doc.id not in marked and doc.id not in still_there]
            taken = [doc.id for doc in docs if doc.id in still_there]
            # A batch with a member forgotten is deleted from the graph and indexed again: its rows keep their text.
            deleted = {doc.backend_id or doc.id for doc in forgotten}
            kept = sorted({doc.backend_id or doc.id for doc in docs if doc.id in marked} - deleted)
            if kept:
                await connection.execute(_DROP_TEXT_NOT_NEEDED, kept)
        if taken:
            log.warning("[RAG] Another process took %s while this one indexed them", ", ".join(taken))
        for doc in docs:
            if doc.id in marked:
                doc.status, doc.last_error = "indexed", None
            elif doc.id not in still_there:
                doc.status, doc.text = "forgotten", ""
        return forgotten

    async def mark_failed(self, failed: Iterable[RagDocument], error: str, config: RagConfig) -> None:
        docs = [count_failure(doc, error, config) for doc in failed]
        if not docs:
            return
        ids = [doc.id for doc in docs]
        async with self._database.transaction() as connection:
            await connection.execute(
                "UPDATE rag_documents AS d SET attempts = t.attempts, next_attempt_at = t.next_attempt_at,"
                " status = t.status, last_error = $5, claimed_by = NULL, claim_until = NULL"
                " FROM unnest($1::text[], $2::integer[], $3::float8[], $4::text[])"
                " AS t(id, attempts, next_attempt_at, status)"
                " WHERE d.id = t.id AND d.claimed_by = $6 AND d.status = 'queued'",
                ids, [doc.attempts for doc in docs], [doc.next_attempt_at for doc in docs],
                [doc.status for doc in docs], docs[0].last_error, self._owner,
            )  # fmt: skip
            await _let_go(connection, ids, self._owner)

    async def forget(self, doc_ids: Iterable[str]) -> list[RagDocument]:
        ids = list(doc_ids)
        if not ids:
            return []
        async with self._database.transaction() as connection:
            rows = await connection.fetch(
                "UPDATE rag_documents SET status = 'forgotten', text = '' WHERE id = ANY($1::text[])"
                f" AND status <> 'forgotten' RETURNING position, {_COLUMNS}",
                ids,
            )
            # Kept as a row without text only while another process indexes it, for that process to see.
            await connection.execute(
                "DELETE FROM rag_documents WHERE id = ANY($1::text[]) AND status = 'forgotten'"
                " AND (claimed_by IS NULL OR claimed_by = $2 OR claim_until < now())",
                ids, self._owner,
            )  # fmt: skip
        return _in_order(rows)

    async def requeue_indexed_in(self, backend_ids: Iterable[str]) -> list[RagDocument]:
        wanted = sorted(set(backend_ids))
        if not wanted:
            return []
        rows = await self._database.fetch(
            "UPDATE rag_documents SET status = 'queued', backend_id = NULL, attempts = 0, next_attempt_at = 0,"
            " claimed_by = $2, claim_until = now() + make_interval(secs => $3)"
            f" WHERE status = 'indexed' AND backend_id = ANY($1::text[]) RETURNING position, {_COLUMNS}",
            wanted, self._owner, self._lease_seconds(),
        )  # fmt: skip
        return _in_order(rows)

    async def get(self, doc_id: str) -> RagDocument | None:
        rows = await self._database.fetch(
            f"SELECT {_COLUMNS} FROM rag_documents WHERE id = $1 AND status <> 'forgotten'", doc_id
        )
        return _document(rows[0]) if rows else None

    async def statuses(self, doc_ids: list[str]) -> dict[str, str]:
        rows = await self._database.fetch(
            "SELECT id, status FROM rag_documents WHERE id = ANY($1::text[]) AND status <> 'forgotten'", doc_ids
        )
        return {str(row["id"]): str(row["status"]) for row in rows}

    async def find(self, *, message_ids: Iterable[str] = (), session_id: str | None = None) -> list[RagDocument]:
        wanted = sorted(set(message_ids))
        if not wanted and not session_id:
            return []
        rows = await self._database.fetch(
            f"SELECT {_COLUMNS} FROM rag_documents WHERE status <> 'forgotten'"
            " AND (message_ids && $1::text[] OR session_id = $2) ORDER BY position",
            wanted, session_id,
        )  # fmt: skip
        return [_document(row) for row in rows]

    async def live(self) -> list[RagDocument]:
        rows = await self._database.fetch(
            f"SELECT {_COLUMNS} FROM rag_documents WHERE status <> 'forgotten'"
            ' ORDER BY created_at COLLATE "C", position'
        )
        return [_document(row) for row in rows]

    async def counts(self) -> Counter[str]:
        rows = await self._database.fetch(
            "SELECT status, count(*) AS n FROM rag_documents WHERE status <> 'forgotten' GROUP BY status"
        )
        return Counter({str(row["status"]): int(row["n"]) for row in rows})

    async def indexed_workspaces(self) -> list[str]:
        rows = await self._database.fetch("SELECT DISTINCT rag_workspace FROM rag_documents WHERE status = 'indexed'")
        return sorted(str(row["rag_workspace"]) for row in rows)

    async def graphs_read(self, rag_workspace: str, session_id: str) -> list[str]:
        # The chat's workspaces one index probe each (`rag_documents_chat_graphs`), however many documents it has.
        rows = await self._database.fetch(
            "WITH RECURSIVE graphs (rag_workspace) AS ("
            " SELECT min(rag_workspace) FROM rag_documents WHERE status = 'indexed' AND session_id = $2"
            " UNION ALL SELECT (SELECT min(d.rag_workspace) FROM rag_documents AS d WHERE d.status = 'indexed'"
            " AND d.session_id = $2 AND d.rag_workspace > g.rag_workspace)"
            " FROM graphs AS g WHERE g.rag_workspace IS NOT NULL)"
            " SELECT rag_workspace FROM graphs WHERE rag_workspace IS NOT NULL"
            " UNION SELECT $1::text WHERE EXISTS"
            " (SELECT 1 FROM rag_documents WHERE status = 'indexed' AND rag_workspace = $1)",
            rag_workspace, session_id,
        )  # fmt: skip
        graphs = sorted(str(row["rag_workspace"]) for row in rows)
        return [rag_workspace, *(g for g in graphs if g != rag_workspace)] if rag_workspace in graphs else graphs

    async def move_session(self, old_session_id: str, new_session_id: str) -> int:
        async with self._database.transaction() as connection:
            moved = await connection.execute(
                "UPDATE rag_documents SET session_id = $2 WHERE session_id = $1", old_session_id, new_session_id
            )
        return int(moved.rsplit(" ", 1)[-1])

    async def indexed_in(self, rag_workspace: str) -> list[RagDocument]:
        rows = await self._database.fetch(
            f"SELECT {_COLUMNS} FROM rag_documents WHERE status = 'indexed' AND rag_workspace = $1 ORDER BY position",
            rag_workspace,
        )
        return [_document(row) for row in rows]


async def _let_go(connection: Any, ids: list[str], owner: str) -> None:
    """Release `owner`'s claims of `ids`. Those forgotten meanwhile and never sent to the graph go now; those
    sent may be in the graph all the same (an insert whose wait ran out), so their rows stay, without text and
    unclaimed, for the next flush of any process to delete what the graph holds under their names."""
    await connection.execute(
        "DELETE FROM rag_documents WHERE id = ANY($1::text[]) AND claimed_by = $2 AND status = 'forgotten'"
        " AND cardinality(tried_as) = 0",
        ids, owner,
    )  # fmt: skip
    await connection.execute(
        "UPDATE rag_documents SET claimed_by = NULL, claim_until = NULL WHERE id = ANY($1::text[]) AND claimed_by = $2",
        ids, owner,
    )  # fmt: skip


def _values(doc: RagDocument) -> tuple[object, ...]:
    return (
        doc.id, doc.session_id, doc.rag_workspace, doc.text, doc.created_at, doc.message_ids, doc.status,
        doc.attempts, doc.next_attempt_at, doc.last_error, doc.backend_id, doc.tried_as,
    )  # fmt: skip


def _qualified(alias: str) -> str:
    return ", ".join(f"{alias}.{column.strip()}" for column in _COLUMNS.split(","))


def _document(row: Any) -> RagDocument:
    return RagDocument(
        id=str(row["id"]), session_id=str(row["session_id"]), rag_workspace=str(row["rag_workspace"]),
        text=str(row["text"]), created_at=str(row["created_at"]), message_ids=[str(m) for m in row["message_ids"]],
        status=str(row["status"]), attempts=int(row["attempts"]), next_attempt_at=float(row["next_attempt_at"]),
        last_error=row["last_error"], backend_id=row["backend_id"], tried_as=[str(n) for n in row["tried_as"]],
    )  # fmt: skip


def _in_order(rows: list[Any]) -> list[RagDocument]:
    """Rows a statement returned (in no order), oldest first as they were added."""
    return [_document(row) for row in sorted(rows, key=lambda row: int(row["position"]))]


# -- moving in and out: `bot migrate` and `bot export` ---------------------------------------------------


async def copy_journal_file(database: Database, path: Path) -> CopiedRecords:
    """Write the documents of a journal file over their rows (safe to repeat): each id as the file's last line
    for it says, a forgotten one's row deleted; an indexed document's text kept only where the table keeps
    it. A line that is not a document is skipped, counted and logged with its number."""
    parsed = parse_numbered(read_text_sync(path) or "", path, RagDocument.from_json, "a document")
    copied = CopiedRecords(skipped_lines=len(parsed.skipped))
    docs: dict[str, RagDocument] = {}
    for doc in parsed.records:
        replay(docs, doc)
    if not docs:
        return copied
    forgotten = [doc.id for doc in docs.values() if doc.status == "forgotten"]
    live = [doc for doc in docs.values() if doc.status != "forgotten"]
    updated = ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS.replace(" ", "").split(",")[1:])
    async with database.transaction() as connection:
        await connection.execute("DELETE FROM rag_documents WHERE id = ANY($1::text[])", forgotten)
        await connection.executemany(
            _INSERT + f" ON CONFLICT (id) DO UPDATE SET {updated}, claimed_by = NULL, claim_until = NULL",
            [_values(doc) for doc in live],
        )
        await connection.execute(_DROP_TEXT_NOT_NEEDED, None)
    copied.records, copied.forgotten = len(live), len(forgotten)
    return copied


async def write_journal_file(database: Database, path: Path) -> int:
    """Write every document not forgotten to the journal file at `path` (atomically), as the files' journal
    keeps it once compacted; how many (none: the file is left as it is)."""
    rows = await database.fetch(f"SELECT {_COLUMNS} FROM rag_documents WHERE status <> 'forgotten' ORDER BY position")
    return await write_records(path, [_document(row).to_json(with_text=True) for row in rows])

"""Sessions and their archive in PostgreSQL (`BOT_DATABASE_URL`): the tables `sessions` and `session_archive`.

A session is a row holding the same JSON document as its file would; the archive is a row per message
line, numbered by the archive's length after it (`end_bytes`), so the byte marks `SessionService`
keeps mean the same as in files. A save is one transaction: the archive's new lines and the document,
both or neither. A document that does not parse is moved to `sessions_quarantined`, never deleted.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from bot.database.connection import Database
from bot.domain.message import Message
from bot.domain.model import utc_now
from bot.domain.session import AgentSession, checked_session_id
from bot.sessions.archive import messages_of
from bot.sessions.storage import ArchiveWriteFailed, StoredSession, with_newer
from bot.sessions.store import CorruptSession, MessageJsonCache, session_from_json
from bot.storage.durability import DeferredSync
from bot.storage.files import line_bytes

log = logging.getLogger(__name__)


class SessionTables:
    """Sessions and archives as rows; every write of one session is serialized by a lock on its id."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._json = MessageJsonCache()

    def document(self, session: AgentSession) -> bytes:
        return self._json.document(session)

    async def load(self, session_id: str) -> StoredSession:
        checked_session_id(session_id)
        unreadable: ValidationError | None = None
        newer: list[Message] = []
        async with self._database.transaction() as connection:
            document = await connection.fetchval("SELECT document FROM sessions WHERE id = $1", session_id)
            archive_bytes = await _archive_bytes(connection, session_id)
            if document is None:
                return StoredSession(None, 0, 0, archive_bytes)
            try:
                session = session_from_json(document, f"session {session_id}")
            except ValidationError as error:
                unreadable = error
                name = f"{session_id}.corrupt-{utc_now().strftime('%Y%m%dT%H%M%S%fZ')}"
                await connection.execute(
                    "INSERT INTO sessions_quarantined (name, session_id, document) VALUES ($1, $2, $3)",
                    name, session_id, document,
                )  # fmt: skip
                await connection.execute("DELETE FROM sessions WHERE id = $1", session_id)
            else:
                mark = session.metadata.archived_bytes
                if 0 < mark < archive_bytes:
                    rows = await connection.fetch(
                        "SELECT line FROM session_archive WHERE session_id = $1 AND end_bytes > $2 ORDER BY end_bytes",
                        session_id, mark,
                    )  # fmt: skip
                    newer = messages_of(session_id, _records(session_id, rows))
        if unreadable is not None:  # raised once the move aside is committed
            log.error("[Session] %s is unreadable (%s); moved to %s", session_id, unreadable.error_count(), name)
            raise CorruptSession(session_id, name) from unreadable
        in_document = len(session.messages)
        return StoredSession(with_newer(session, newer), in_document, len(document.encode()), archive_bytes)

    async def write(
        self, session_id: str, archive_lines: list[str], document: bytes | None, deferred: DeferredSync | None
    ) -> int | None:
        # `deferred` is not needed: the archive's lines and the document commit together, durably.
        checked_session_id(session_id)
        if not archive_lines and document is None:
            return None
        try:
            async with self._database.transaction() as connection:
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext('session:' || $1))", session_id)
                length = await _archive_bytes(connection, session_id)
                rows = []
                for line in archive_lines:
                    length += len(line_bytes(line))
                    rows.append((session_id, length, line))
                if rows:
                    await connection.executemany(
                        "INSERT INTO session_archive (session_id, end_bytes, line) VALUES ($1, $2, $3)", rows
                    )
                if document is not None:
                    await connection.execute(
                        "INSERT INTO sessions (id, document, updated_at) VALUES ($1, $2, now())"
                        " ON CONFLICT (id) DO UPDATE SET document = excluded.document, updated_at = now()",
                        session_id, document.decode(),
                    )  # fmt: skip
        except OSError as error:
            raise ArchiveWriteFailed(error.errno, error.strerror or str(error), session_id) from error
        return length

    async def read_archive(self, session_id: str) -> list[Message]:
        rows = await self._database.fetch(
            "SELECT line FROM session_archive WHERE session_id = $1 ORDER BY end_bytes", session_id
        )
        return messages_of(session_id, _records(session_id, rows))

    async def delete(self, session_id: str) -> None:
        async with self._database.transaction() as connection:
            await connection.execute("DELETE FROM sessions WHERE id = $1", session_id)

    async def delete_archive(self, session_id: str) -> None:
        async with self._database.transaction() as connection:
            await connection.execute("DELETE FROM session_archive WHERE session_id = $1", session_id)

    async def list_ids(self) -> list[str]:
        return [row["id"] for row in await self._database.fetch("SELECT id FROM sessions ORDER BY updated_at")]


async def _archive_bytes(connection: Any, session_id: str) -> int:
    length = await connection.fetchval(
        "SELECT coalesce(max(end_bytes), 0) FROM session_archive WHERE session_id = $1", session_id
    )
    return int(length)


def _records(session_id: str, rows: list[Any]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for row in rows:
        try:
            record = json.loads(row["line"])
        except ValueError:
            log.warning("[Session] Skipped an archive line of %s that is not JSON", session_id)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records

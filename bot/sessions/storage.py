"""Where sessions and their archive are kept: the `SessionStorage` interface and its files.

`SessionService` decides what to write and when (the cache, the locks, `RewriteSchedule`); a storage
only keeps it: a session's stored document and its archive, the messages appended in order. The
archive's length is counted in the bytes of its lines (`lines_of`), in files and in PostgreSQL
alike: a stored document records how long the archive was when it was written
(`metadata.archivedBytes`), and a load brings back the messages archived after that.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.sessions.archive import MessageArchive
from bot.sessions.store import SessionFileStore
from bot.storage.durability import DeferredSync

log = logging.getLogger(__name__)


class ArchiveWriteFailed(OSError):
    """The archive's append failed, and the stored document was left as it was."""


@dataclass(frozen=True)
class StoredSession:
    """A session as loaded: how many of its messages the stored document holds (the rest came from the
    archive), the document's size, and the archive's length (None: it could not be read)."""

    session: AgentSession | None
    in_document: int = 0
    document_bytes: int = 0
    archive_bytes: int | None = 0


class SessionStorage(Protocol):
    """Sessions and their archives, kept. A failed write raises `OSError` (`ArchiveWriteFailed` when
    nothing was written)."""

    def document(self, session: AgentSession) -> bytes:
        """The session's stored form: its whole JSON document."""
        ...

    async def load(self, session_id: str) -> StoredSession:
        """The stored session with the messages archived after its document was written. Raises
        `CorruptSession` after putting an unreadable document aside."""
        ...

    async def write(
        self, session_id: str, archive_lines: list[str], document: bytes | None, deferred: DeferredSync | None
    ) -> int | None:
        """Append `archive_lines` (durably), then replace the stored document with `document` if given
        (with `deferred`, a power cut may lose that one; the archive has what it adds). The archive's
        length after, or None when neither was written to."""
        ...

    async def read_archive(self, session_id: str) -> list[Message]:
        """Every message the chat ever had, oldest first, each once."""
        ...

    async def delete(self, session_id: str) -> None:
        """Forget the stored document (the archive stays)."""
        ...

    async def delete_archive(self, session_id: str) -> None:
        """Forget the archive (a chat that moved to another id, whose archive now holds every line of it)."""
        ...

    async def list_ids(self) -> list[str]:
        """Every stored session's id, the least recently written first."""
        ...


class SessionFiles:
    """`sessions/{id}.json` (whole documents, rewritten atomically) and `sessions/archive/{id}.jsonl`."""

    def __init__(self, sessions_dir: Path) -> None:
        self.store = SessionFileStore(sessions_dir)
        self.archive = MessageArchive(sessions_dir / "archive")

    def document(self, session: AgentSession) -> bytes:
        return self.store.document(session)

    async def load(self, session_id: str) -> StoredSession:
        return await asyncio.to_thread(self._load_sync, session_id)

    def _load_sync(self, session_id: str) -> StoredSession:
        stored = self.store.load_sync(session_id)
        session, file_bytes = stored if stored is not None else (None, 0)
        in_file = len(session.messages) if session is not None else 0
        mark = session.metadata.archived_bytes if session is not None else 0
        try:
            archive_bytes = self.archive.size_sync(session_id)
            newer = self.archive.read_from_sync(session_id, mark) if 0 < mark < archive_bytes else []
        except OSError as error:
            # The session is still served from its file; the schedule rewrites that on every save until
            # the archive can be read again (its length unknown, nothing is left to it alone).
            log.error(
                "[Session] %s: the archive cannot be read (%s); the session is as its file holds it", session_id, error
            )
            return StoredSession(session, in_file, file_bytes, None)
        if session is None:
            return StoredSession(None, 0, 0, archive_bytes)
        return StoredSession(with_newer(session, newer), in_file, file_bytes, archive_bytes)

    async def write(
        self, session_id: str, archive_lines: list[str], document: bytes | None, deferred: DeferredSync | None
    ) -> int | None:
        try:
            archive_bytes = await self.archive.append_lines(session_id, archive_lines) if archive_lines else None
        except OSError as error:
            raise ArchiveWriteFailed(error.errno, error.strerror or str(error), error.filename) from error
        if document is not None:
            await self.store.write(session_id, document, deferred)
            if archive_bytes is None:  # so the length the file records is checked against the archive
                archive_bytes = self.archive.size_sync(session_id)
        return archive_bytes

    async def read_archive(self, session_id: str) -> list[Message]:
        return await self.archive.read(session_id)

    async def delete(self, session_id: str) -> None:
        await self.store.delete(session_id)

    async def delete_archive(self, session_id: str) -> None:
        await asyncio.to_thread(self.archive.path_for(session_id).unlink, missing_ok=True)

    async def list_ids(self) -> list[str]:
        return await asyncio.to_thread(self.store.list_ids)


def with_newer(session: AgentSession, newer: list[Message]) -> AgentSession:
    """The session with the archived messages its document lacks added at the end (logged)."""
    known = {message.id for message in session.messages}
    newer = [message for message in newer if message.id not in known]
    session.messages.extend(newer)
    if newer:
        log.info("[Session] %s: read %d messages back from the archive", session.id, len(newer))
    return session

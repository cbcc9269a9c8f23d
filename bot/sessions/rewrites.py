"""`RewriteSchedule`: on which saves a chat's session file is rewritten, and whether it waits for an fsync.

Every save appends the new messages to the archive (one fsync'd append), so the archive is the turn
log and the session file a snapshot of it. The file records how long the archive was when it was
written (`metadata.archivedBytes`), and loading it reads back the messages archived after that
(`SessionService`). A usual chat's file is rewritten on every save, so an outside reader finds it
current after each turn. A long one's (past `REWRITE_EVERY_SAVE_BELOW_BYTES`, about 800 messages:
compaction is off or the model's window is huge) is rewritten once the archive has grown by
`REWRITE_AFTER_SHARE` of the file since, so the bytes written per turn stay flat however long the
session.

A rewrite after appends only does not wait for its fsync (`Rewrite.DEFERRED`): a file a power cut left
behind is brought up to date from the archive. A change that is not an append (a compaction, `/new`,
a retry, a new state or setting) is not in the archive: it is written at once and durably
(`Rewrite.DURABLE`), whatever the size.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import Final

from bot.domain.message import Message
from bot.domain.session import AgentSession

REWRITE_EVERY_SAVE_BELOW_BYTES: Final = 256 * 1024
REWRITE_AFTER_SHARE: Final = 0.25
# Metadata every turn changes (figures for /status): a change of only these does not make a rewrite
# due, and a crash before the next rewrite loses their newest values, never a message.
_PER_TURN_KEYS: Final = frozenset({"lastPromptTokens", "lastUsage", "archivedBytes"})


class Rewrite(enum.Enum):
    """How a save rewrites the session file."""

    DURABLE = "durable"  # fsync'd before the save returns
    DEFERRED = "deferred"  # fsync'd by the next round of `DeferredSync`: the archive holds what it adds


@dataclass
class _InFile:
    """What one session's file holds, as of its last write (or load)."""

    owner: weakref.ReferenceType[AgentSession]
    # The message list the file was written from, kept alive so its identity means the same list.
    messages: list[Message]
    count: int
    last: Message | None
    head: tuple[object, ...]
    file_bytes: int
    # Whether the file records the archive's length (it may then be left behind the archive).
    resumable: bool
    # The archive's length now (None: unknown after a failed write) and how much of it the file lacks.
    archive_bytes: int | None
    behind_bytes: int


class RewriteSchedule:
    """Tracks what each live session's file holds, and says whether a save must rewrite it."""

    def __init__(self) -> None:
        self._in_file: dict[int, _InFile] = {}

    def due(self, session: AgentSession, appended_bytes: int) -> Rewrite | None:
        """How a save that appends `appended_bytes` to the archive rewrites the session file (None: not
        at all, the archive holds what the file lacks)."""
        known = self._in_file.get(id(session))
        if known is None or known.owner() is not session or not known.resumable or known.archive_bytes is None:
            return Rewrite.DURABLE
        if not _only_appended(known, session):
            return Rewrite.DURABLE
        if known.file_bytes < REWRITE_EVERY_SAVE_BELOW_BYTES:
            return Rewrite.DEFERRED
        if known.behind_bytes + appended_bytes >= known.file_bytes * REWRITE_AFTER_SHARE:
            return Rewrite.DEFERRED
        return None

    def archive_mark(self, session: AgentSession, appended_bytes: int) -> int:
        """The `archivedBytes` the file written now records: the archive's length after this save's
        append (0, left out of the file, when it is unknown)."""
        known = self._in_file.get(id(session))
        if known is None or known.archive_bytes is None or known.owner() is not session:
            return 0
        return known.archive_bytes + appended_bytes

    def loaded(self, session: AgentSession, in_file: int, file_bytes: int, archive_bytes: int | None) -> None:
        """`session` was read: its file holds its first `in_file` messages; the rest came from the archive
        (`archive_bytes` long; None when it could not be read)."""
        mark = session.metadata.archived_bytes
        behind = 0 if archive_bytes is None else max(0, archive_bytes - mark)
        self._remember(session, in_file, file_bytes, mark > 0, archive_bytes, behind)

    def written(self, session: AgentSession, file_bytes: int, archive_bytes: int | None) -> None:
        """The file was rewritten with the whole session; the archive is `archive_bytes` long (None: the
        save appended nothing to it)."""
        if archive_bytes is None:
            archive_bytes = self._archive_bytes(session)
        mark = session.metadata.archived_bytes
        resumable = archive_bytes is not None and mark > 0 and mark == archive_bytes
        self._remember(session, len(session.messages), file_bytes, resumable, archive_bytes, 0)

    def appended(self, session: AgentSession, archive_bytes: int | None) -> None:
        """The file was left as it was; the archive grew to `archive_bytes` (None: it did not grow)."""
        known = self._in_file[id(session)]
        if archive_bytes is None:
            return
        if known.archive_bytes is not None:
            known.behind_bytes += archive_bytes - known.archive_bytes
        known.archive_bytes = archive_bytes

    def failed(self, session: AgentSession) -> None:
        """A save failed part way: the archive's length is unknown, so the next save rewrites the file."""
        known = self._in_file.get(id(session))
        if known is not None and known.owner() is session:
            known.archive_bytes = None

    def behind(self) -> list[AgentSession]:
        """The live sessions whose file lacks messages or figures the archive and memory have."""
        sessions = [(known.owner(), known) for known in list(self._in_file.values())]
        return [
            session
            for session, known in sessions
            if session is not None and (known.behind_bytes > 0 or not _only_appended(known, session))
        ]

    def _archive_bytes(self, session: AgentSession) -> int | None:
        known = self._in_file.get(id(session))
        return known.archive_bytes if known is not None and known.owner() is session else None

    def _remember(
        self,
        session: AgentSession,
        count: int,
        file_bytes: int,
        resumable: bool,
        archive_bytes: int | None,
        behind_bytes: int,
    ) -> None:
        key = id(session)
        if key not in self._in_file:
            weakref.finalize(session, self._in_file.pop, key, None)
        messages = session.messages
        self._in_file[key] = _InFile(
            owner=weakref.ref(session),
            messages=messages,
            count=count,
            last=messages[count - 1] if count else None,
            head=_head(session),
            file_bytes=file_bytes,
            resumable=resumable,
            archive_bytes=archive_bytes,
            behind_bytes=behind_bytes,
        )


def _only_appended(known: _InFile, session: AgentSession) -> bool:
    """Whether the session changed since its file was written only by appending messages (O(1): the
    same list, no shorter, the same message where the file's last one was, the same state and settings)."""
    messages = session.messages
    return (
        messages is known.messages
        and len(messages) >= known.count
        and (known.count == 0 or messages[known.count - 1] is known.last)
        and _head(session) == known.head
    )


def _head(session: AgentSession) -> tuple[object, ...]:
    """What the file holds besides the messages that a rewrite must carry (not `updatedAt` or figures)."""
    metadata = session.metadata.model_dump()
    durable = tuple((key, value) for key, value in metadata.items() if key not in _PER_TURN_KEYS)
    return (session.state, session.created_at, durable)

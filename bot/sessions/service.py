"""`SessionService`: get-or-create, save, clear and delete chat sessions, cached in memory.

Callers that change a session hold its lock (`lock_for`) for the whole change; the pipeline holds it
for a run. A change is an append of messages, or assigns a new list (`replace_messages`,
`clear_messages`); a stored message is never edited in place. Saving messages appends them to the
archive, the one durable write of a turn, and rewrites the session file when `RewriteSchedule` says
so: on every save for a usual chat, every so many turns for a long one; the file records how long the
archive was, and the messages archived after that are read back from the archive when it is loaded
(a rewrite after appends only therefore need not wait for its fsync). A message may also be added unwritten
(`add_unwritten`): the next save writes it with the rest, which lets a plain turn write its question
and answer at once.

The cache keeps the `CACHE_MAX_SESSIONS` most recently used sessions; older ones are dropped and read
again from disk when their chat speaks, so resident memory stays bounded however many chats there
are. A dropped session that some task still holds is found again through a weak reference (there is
never a second copy of one chat's session), and one whose last save failed is kept until a save
succeeds (its unwritten change lives only in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from bot.domain.chat_move import ChatMove
from bot.domain.message import Message
from bot.domain.model import utc_now
from bot.domain.session import AgentSession, session_id_for
from bot.sessions.archive import lines_of
from bot.sessions.rewrites import Rewrite, RewriteSchedule
from bot.sessions.storage import ArchiveWriteFailed, SessionStorage
from bot.sessions.store import CorruptSession
from bot.storage.durability import DeferredSync
from bot.storage.files import line_bytes

log = logging.getLogger(__name__)

# Sessions kept in memory after their last use (a session of 20 messages is tens of KB).
CACHE_MAX_SESSIONS = 1000

# The move done of a chat (channel type, chat id), if it has one.
WhereMoved = Callable[[str, str], Awaitable[ChatMove | None]]


class SessionPersistError(Exception):
    """A session could not be written (disk full, read-only workspace). Nothing is lost: the session
    stays in memory, and what was not written goes out with the next save that succeeds."""


class SessionService:
    """The live sessions of every chat: one cached `AgentSession` per id, persisted on every change."""

    def __init__(
        self, storage: SessionStorage, deferred: DeferredSync | None = None, where_moved: WhereMoved | None = None
    ) -> None:
        """`storage`: the workspace's files or PostgreSQL; `deferred`: where a rewrite the archive can stand
        in for leaves its fsync (without one, every write is durable before it returns); `where_moved`: asked
        where a chat went when its session is not stored, when another process may have moved it (replicas
        sharing a database)."""
        self._where_moved = where_moved
        self._deferred = deferred
        self._storage = storage
        # Most recently used last; bounded by `CACHE_MAX_SESSIONS`.
        self._cache: OrderedDict[str, AgentSession] = OrderedDict()
        # Every session object still alive anywhere (a run holding one the cache dropped).
        self._alive: weakref.WeakValueDictionary[str, AgentSession] = weakref.WeakValueDictionary()
        # Sessions whose last save failed: held until a save succeeds, whatever the cache drops.
        self._unsaved: dict[str, AgentSession] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # Messages not in the archive yet (added unwritten, or their append failed), written ahead of the
        # next save so the archive stays whole.
        self._unarchived: dict[str, list[Message]] = {}
        self._rewrites = RewriteSchedule()
        # Chats that live on under another id (a group upgraded to a supergroup): the old session's id, the
        # new chat (channel type, chat id). A message of the old chat still on its way belongs to the new.
        self._moved: dict[str, tuple[str, str]] = {}

    @property
    def storage(self) -> SessionStorage:
        """Where the sessions are kept (the workspace's files, or PostgreSQL)."""
        return self._storage

    def lock_for(self, session_id: str) -> asyncio.Lock:
        """The chat's lock; the same object for as long as anyone holds or waits on it."""
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _cached(self, session_id: str) -> AgentSession | None:
        session = self._cache.get(session_id) or self._alive.get(session_id)
        if session is not None:
            self._keep(session)
        return session

    def _keep(self, session: AgentSession) -> AgentSession:
        """Remember `session` as the most recently used one, dropping the least recently used past the bound."""
        self._cache[session.id] = session
        self._cache.move_to_end(session.id)
        self._alive[session.id] = session
        while len(self._cache) > CACHE_MAX_SESSIONS:
            self._cache.popitem(last=False)
        return session

    @contextlib.asynccontextmanager
    async def held(self, channel_type: str, chat_id: str) -> AsyncIterator[AgentSession]:
        """The chat's session (`get_or_create`) with its lock held for the block; when the chat moved while
        the lock was waited for (`follow_move`), its new session, with that one's lock."""
        while True:
            session = await self.get_or_create(channel_type, chat_id)
            async with self.lock_for(session.id):
                current = await self.get_or_create(channel_type, chat_id)
                if current.id == session.id:
                    yield current
                    return

    async def chat_id_now(self, channel_type: str, chat_id: str) -> str:
        """The id the chat has now: its own, or the one it moved to (a group become a supergroup). A move of the
        chat under way is waited for (it holds the chat's lock), so what is read of the chat afterwards moved."""
        async with self.held(channel_type, chat_id) as session:
            return session.chat_id

    def follow_move(self, old_session_id: str, channel_type: str, new_chat_id: str) -> None:
        """From now on the chat of `old_session_id` is the chat `new_chat_id`: asking for one gives the other's
        session (its data has moved there)."""
        self._moved[old_session_id] = (channel_type, new_chat_id)
        self._cache.pop(old_session_id, None)
        self._alive.pop(old_session_id, None)

    async def get_or_create(self, channel_type: str, chat_id: str) -> AgentSession:
        """The chat's session from the cache or disk, or a new one (not yet written)."""
        session_id = session_id_for(channel_type, chat_id)
        if session_id in self._moved:
            channel_type, chat_id = self._moved[session_id]
            session_id = session_id_for(channel_type, chat_id)
        cached = self._cached(session_id)
        if cached is not None:
            return cached
        try:
            session = await self._load(session_id, create=(channel_type, chat_id))
        except CorruptSession as corrupt:
            session = AgentSession.new(channel_type, chat_id)
            session.metadata.recovered_from = corrupt.quarantined_as
        if session is None:
            return await self.get_or_create(channel_type, chat_id)  # moved, and followed now: the new chat's
        # Another task may have loaded it meanwhile; the first one in wins so there is one object.
        return self._cached(session_id) or self._keep(session)

    async def get(self, session_id: str) -> AgentSession | None:
        """The session if it exists in the cache or on disk; never creates one."""
        if session_id in self._moved:
            session_id = session_id_for(*self._moved[session_id])
        cached = self._cached(session_id)
        if cached is not None:
            return cached
        try:
            session = await self._load(session_id)
        except CorruptSession:
            return None
        return None if session is None else self._cached(session_id) or self._keep(session)

    async def _load(self, session_id: str, create: tuple[str, str] | None = None) -> AgentSession | None:
        """The session from its file, with the messages archived after the file was written; with no file,
        a new session for `create` (channel type, chat id), or None. Raises `CorruptSession` (after
        quarantining the file)."""
        stored = await self._storage.load(session_id)
        session = stored.session
        if session is None and create is not None:
            if await self._learn_move(*create):
                return None
            session = AgentSession.new(*create)
        if session is not None:
            self._rewrites.loaded(session, stored.in_document, stored.document_bytes, stored.archive_bytes)
        return session

    async def _learn_move(self, channel_type: str, chat_id: str) -> bool:
        """Whether a chat without a stored session was moved by another process (else it is new); followed
        from then on. Asked only then: a chat's session is stored after its first turn."""
        if self._where_moved is None:
            return False
        try:
            move = await self._where_moved(channel_type, chat_id)
        except OSError as error:  # the store just answered the load: rare, and the chat is answered as new
            log.warning("[Session] Could not ask whether %s:%s moved: %s", channel_type, chat_id, error)
            return False
        if move is None or move.new_session_id == move.old_session_id:
            return False
        log.info("[Session] %s was moved by another process; following it", move)
        self.follow_move(move.old_session_id, move.channel_type, move.new_chat_id)
        return True

    def add_unwritten(self, session: AgentSession, messages: list[Message]) -> None:
        """Add messages to the live session in memory only; the next save writes them (archive and session).

        For a message that is durable elsewhere until then: the user's message of a turn, which the turn
        ledger holds until the turn ends. The turn's one save then writes the question with its answer.
        """
        session.messages.extend(messages)
        self._unarchived.setdefault(session.id, []).extend(messages)

    def has_unwritten(self, session: AgentSession) -> bool:
        return bool(self._unarchived.get(session.id))

    async def write_unwritten(self) -> None:
        """At a stop: save every session holding what its file lacks (messages added unwritten, the
        question of a turn cut short; or a long session's newest turns, which only the archive has)."""
        behind = {session.id: session for session in self._rewrites.behind()}
        behind.update((id_, session) for id_ in self._unarchived if (session := self._cached(id_)) is not None)
        for session_id, session in behind.items():
            async with self.lock_for(session_id):
                with contextlib.suppress(SessionPersistError):  # logged by `save`; the journal still has it
                    await self._save(session, rewrite=True)

    async def append_messages(self, session: AgentSession, messages: list[Message]) -> None:
        """Add messages: one archive append (with any written ahead), then one atomic rewrite of the session."""
        self.add_unwritten(session, messages)
        await self.save(session)

    async def save(self, session: AgentSession) -> None:
        """Append the messages the archive does not have yet, then rewrite the session file if it is due.

        The session file is not touched when the archive append failed."""
        await self._save(session, rewrite=False)

    async def _save(self, session: AgentSession, *, rewrite: bool) -> None:
        session.updated_at = utc_now()
        self._keep(session)
        pending = self._unarchived.pop(session.id, [])
        lines = lines_of(pending)
        appended = sum(len(line_bytes(line)) for line in lines)
        document = None
        how = Rewrite.DURABLE if rewrite else self._rewrites.due(session, appended)
        if how is not None:
            session.metadata.archived_bytes = self._rewrites.archive_mark(session, appended)
            document = self._storage.document(session)
        deferred = self._deferred if how is Rewrite.DEFERRED else None
        try:
            archive_bytes = await self._storage.write(session.id, lines, document, deferred)
        except ArchiveWriteFailed as error:
            self._unarchived[session.id] = pending
            self._unsaved[session.id] = session
            log.error("[Session] Could not archive %d messages of %s: %s", len(pending), session.id, error)
            raise SessionPersistError(_describe(error)) from error
        except OSError as error:
            self._rewrites.failed(session)
            self._unsaved[session.id] = session
            log.error("[Session] Could not save %s: %s", session.id, error)
            raise SessionPersistError(_describe(error)) from error
        if document is None:
            self._rewrites.appended(session, archive_bytes)
        else:
            self._rewrites.written(session, len(document), archive_bytes)
        self._unsaved.pop(session.id, None)

    async def write_now(self, session: AgentSession) -> None:
        """Append what the archive lacks and rewrite the stored document, durably, whatever the schedule says."""
        await self._save(session, rewrite=True)

    async def replace_messages(
        self, session: AgentSession, messages: list[Message], new: list[Message] | None = None
    ) -> None:
        """Rewrite the live conversation once (compaction, a retry, closed tool calls); `new` are those of
        `messages` the archive does not hold yet, appended to it first."""
        session.messages = list(messages)
        if new:
            self._unarchived.setdefault(session.id, []).extend(new)
        await self.save(session)

    async def clear_messages(self, session: AgentSession) -> int:
        """Empty the live conversation (`/new`); the archive keeps everything. Returns how many went."""
        removed = len(session.messages)
        session.messages.clear()
        await self.save(session)
        log.info("[Session] Cleared %s (%d messages)", session.id, removed)
        return removed

    def reread(self, session_id: str) -> None:
        """Read the chat's session from the store on its next use: another process sharing the database may
        have changed it. A session holding a change not written yet stays (dropping it would lose that)."""
        if session_id in self._unsaved or session_id in self._unarchived:
            return
        self._cache.pop(session_id, None)
        self._alive.pop(session_id, None)

    async def delete(self, session_id: str) -> None:
        self._cache.pop(session_id, None)
        self._alive.pop(session_id, None)
        self._unsaved.pop(session_id, None)
        self._unarchived.pop(session_id, None)
        await self._storage.delete(session_id)

    async def delete_archive(self, session_id: str) -> None:
        """Forget the chat's archive (`SessionStorage.delete_archive`)."""
        await self._storage.delete_archive(session_id)

    async def message_count(self, session_id: str) -> int:
        session = await self.get(session_id)
        return 0 if session is None else len(session.messages)

    def cached(self) -> list[AgentSession]:
        """The sessions in memory: the most recently used chats (idle compaction looks at these)."""
        return list(self._cache.values())

    async def stored_ids(self) -> list[str]:
        return await self._storage.list_ids()

    async def read_archive(self, session_id: str) -> list[Message]:
        """Every message the chat ever had, uncompacted, oldest first."""
        return await self._storage.read_archive(session_id)


def _describe(error: OSError) -> str:
    return error.strerror or type(error).__name__

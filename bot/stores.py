"""The storage of each concern, chosen once at start: the workspace's files, or PostgreSQL when
`BOT_DATABASE_URL` is set. Nothing else knows which: each concern's service takes its store by its interface.
The knowledge graph's journal is chosen beside the graph's own storage, by `bot.rag.factory`, from `database`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.access.pairing import PairingStorage, PairingStore, pairing_file
from bot.access.pairing_db import PairingTables
from bot.database.connection import Database, DatabaseError
from bot.ledger.postgres import LedgerTables
from bot.ledger.store import LedgerFile, LedgerStore
from bot.ledger.turns import Turn
from bot.memory.documents import DocumentsInDatabase, MemoryDocuments
from bot.memory.postgres_documents import MemoryDocumentRows
from bot.pipeline.trace_files import TraceFiles
from bot.pipeline.trace_records import TraceStore
from bot.pipeline.trace_table import TraceTable
from bot.scheduler.reminder_store import ReminderFile, ReminderStore, ReminderTable
from bot.sessions.postgres import SessionTables
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles, SessionStorage
from bot.settings import EnvSettings
from bot.storage.durability import DeferredSync
from bot.workspace import Workspace

if TYPE_CHECKING:
    # The items' database store brings the memory's index and numpy: imported when a database is used, so
    # that the commands that build no bot (`pairing`, `init`) start without them.
    from bot.memory.postgres_items import ItemRowsInDatabase

log = logging.getLogger(__name__)

# How often a chat's message asks again whether an older one, held by another process, is answered.
ORDER_POLL_SECONDS = 0.05
# How long a chat's message waits for an older one before it says so in the log (it waits on).
ORDER_WAIT_LOG_SECONDS = 30.0


@dataclass
class Stores:
    """Each concern's store, and the database they share (None: every store is the workspace's files)."""

    database: Database | None
    ledger: LedgerStore
    sessions: SessionStorage
    # MEMORY.md and the daily notes of each memory scope, by its folder under memory/ (None: the scope's files).
    memory_documents: DocumentsInDatabase | None
    # The memory items of every scope and their vectors (None: each scope's files).
    memory_items: ItemRowsInDatabase | None
    reminders: ReminderStore
    pairing: PairingStorage
    # The console's recent turns of each chat ("why this reply").
    traces: TraceStore

    async def start(self) -> None:
        """Open the database and bring its schema up to date (nothing to do for files)."""
        if self.database is not None:
            await self.database.start()

    async def close(self) -> None:
        if self.memory_items is not None:
            self.memory_items.close()
        if self.database is not None:
            await self.database.close()


def choose_stores(env: EnvSettings, workspace: Workspace, deferred: DeferredSync) -> Stores:
    """The stores `env` asks for: PostgreSQL's with `BOT_DATABASE_URL`, the workspace's files without."""
    if env.bot_database_url is None:
        return Stores(
            None,
            LedgerFile(workspace.root / "state" / "turns.jsonl", deferred),
            SessionFiles(workspace.sessions_dir),
            None,
            None,
            ReminderFile(workspace.reminders_file),
            PairingStore(pairing_file(workspace.root)),
            TraceFiles(workspace.root / "state" / "traces", deferred),
        )
    from bot.memory.postgres_items import ItemRowsInDatabase

    database = Database(env.bot_database_url.get_secret_value())

    def memory_documents(scope: str) -> MemoryDocuments:
        return MemoryDocumentRows(database, scope)

    return Stores(
        database,
        LedgerTables(database),
        SessionTables(database),
        memory_documents,
        ItemRowsInDatabase(database),
        ReminderTable(database),
        PairingTables(database),
        TraceTable(database),
    )


def chat_lock(database: Database, session_id: str) -> AbstractAsyncContextManager[object]:
    """The lock of the chat `session_id` among every process of the database: held to answer it, and to move
    it (`bot.chat_moves`)."""
    return database.lock(f"chat:{session_id}")


def shared_chat_lock(
    database: Database,
    ledger: LedgerTables,
    sessions: SessionService,
    arrival: Callable[[str], Awaitable[None]],
) -> Callable[[Turn], AbstractAsyncContextManager[None]]:
    """The lock of a turn's chat among every process of the database, held while the turn runs.

    Once taken, an older message of the chat that another running process received and has not answered
    yet goes first (the lock is let go and taken again), however long that takes; one whose process is
    gone is not waited for (its turn is taken over by another). The chat's session is then read again,
    since another process may have answered the chat meanwhile. A chat that moved to another id (learnt from
    the database when its old id has no session) takes its new id's lock as well. First, `arrival` waits for
    the moves into the chat under way in this process, which take its lock among processes after its lock in
    this process."""

    async def take(turn: Turn) -> contextlib.AsyncExitStack:
        started = time.monotonic()
        told = False
        while True:
            stack = contextlib.AsyncExitStack()
            try:
                await stack.enter_async_context(chat_lock(database, turn.session_id))
            except DatabaseError as error:
                log.error("[Database] Answering %s without its lock (%s)", turn.session_id, error)
                return stack
            try:
                if turn.id is None or not turn.recorded:
                    return stack
                inbound = turn.inbound
                holder = await ledger.waits_behind(turn.id, inbound.channel_type, inbound.chat_id)
                if holder is None:
                    return stack
            except DatabaseError:
                return stack
            except BaseException:
                await stack.aclose()
                raise
            await stack.aclose()
            if not told and time.monotonic() - started >= ORDER_WAIT_LOG_SECONDS:
                told = True
                log.warning(
                    "[Database] A message of %s has waited %.0f s for an older one that process %s holds (it runs)",
                    turn.session_id,
                    time.monotonic() - started,
                    holder,
                )
            await asyncio.sleep(ORDER_POLL_SECONDS)

    @contextlib.asynccontextmanager
    async def held(turn: Turn) -> AsyncIterator[None]:
        await arrival(turn.session_id)
        async with await take(turn):
            sessions.reread(turn.session_id)
            moved_to = await _moved_to(turn)
            if moved_to is None:
                yield
                return
            # A chat that moved (a group upgraded to a supergroup) is answered in its new id's session: that
            # chat's lock too, and its session read again.
            async with contextlib.AsyncExitStack() as stack:
                try:
                    await stack.enter_async_context(chat_lock(database, moved_to))
                except DatabaseError as error:
                    log.error("[Database] Answering %s without its lock (%s)", moved_to, error)
                sessions.reread(moved_to)
                yield

    async def _moved_to(turn: Turn) -> str | None:
        """The session id the turn's chat moved to, if it did (learnt from the database when its session is not
        stored: the load the turn makes anyway, made now)."""
        inbound = turn.inbound
        try:
            session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        except OSError:
            return None  # the turn meets the same error and answers it
        return None if session.id == turn.session_id else session.id

    return held

"""The storage of each concern, chosen once at start: the workspace's files, or PostgreSQL when
`BOT_DATABASE_URL` is set. Nothing else knows which: each concern's service takes its store by its interface.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.access.pairing import PairingStorage, PairingStore, pairing_file
from bot.access.pairing_db import PairingTables
from bot.database.connection import Database
from bot.ledger.postgres import LedgerTables
from bot.ledger.store import LedgerFile, LedgerStore
from bot.memory.documents import DocumentsInDatabase, MemoryDocuments
from bot.memory.postgres_documents import MemoryDocumentRows
from bot.scheduler.reminder_store import ReminderFile, ReminderStore, ReminderTable
from bot.sessions.postgres import SessionTables
from bot.sessions.storage import SessionFiles, SessionStorage
from bot.settings import EnvSettings
from bot.storage.durability import DeferredSync
from bot.workspace import Workspace


@dataclass
class Stores:
    """Each concern's store, and the database they share (None: every store is the workspace's files)."""

    database: Database | None
    ledger: LedgerStore
    sessions: SessionStorage
    # MEMORY.md and the daily notes of each memory scope, by its folder under memory/ (None: the scope's files).
    memory_documents: DocumentsInDatabase | None
    reminders: ReminderStore
    pairing: PairingStorage

    async def start(self) -> None:
        """Open the database and bring its schema up to date (nothing to do for files)."""
        if self.database is not None:
            await self.database.start()

    async def close(self) -> None:
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
            ReminderFile(workspace.reminders_file),
            PairingStore(pairing_file(workspace.root)),
        )
    database = Database(env.bot_database_url.get_secret_value())

    def memory_documents(scope: str) -> MemoryDocuments:
        return MemoryDocumentRows(database, scope)

    return Stores(
        database,
        LedgerTables(database),
        SessionTables(database),
        memory_documents,
        ReminderTable(database),
        PairingTables(database),
    )

"""`python -m bot migrate`: copy a workspace's files into the database of `BOT_DATABASE_URL`.

What is copied: sessions and their archives, MEMORY.md and the daily notes of every memory scope, the
reminders, pairing, `preferences/runtime-config.json` (its text as it is), the knowledge graph's journal
`rag/documents.jsonl`, the documents sent in chats `rag/uploads.jsonl` and the chats whose id changed
`state/chat_moves.jsonl` (a line of these that is not a record is skipped, counted in the summary and named
in the log); what the files hold wins over what the database holds for the same session, document,
reminder, user, configuration, journal entry, upload or chat move.
Safe to run twice: an archive line is keyed by the archive's length after it (as the bot keeps it), so a
line copied before is not copied again, and every other row is written over (the configuration's version
is raised only when its text changed). The workspace's files are left as they are. The memory items of
every scope are copied file by file (a file's rows are replaced by its lines: a line that is not a valid
item is kept, counted in the summary and named in the log), with the vectors cached beside them. The turn
ledger is not copied (a stopped bot's open turns are answered by the next start on the files).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from bot.access.pairing import PairingStore, pairing_file
from bot.chat_move_records import copy_moves_file
from bot.database.connection import Database
from bot.memory.documents import LONG_TERM_NAME
from bot.memory.paths import CHAT_SCOPES_DIR, USER_SCOPES_DIR
from bot.memory.postgres_documents import MemoryDocumentRows
from bot.memory.postgres_items import CopiedItems, copy_item_files, copy_vectors
from bot.memory.vector_cache import VectorCache
from bot.rag.journal_table import copy_journal_file
from bot.rag.upload_table import copy_uploads_file
from bot.runtime_config_db import RuntimeConfigRow
from bot.scheduler.reminder_store import ReminderFile, ReminderTable
from bot.storage.files import line_bytes, read_text_sync
from bot.workspace import MemoryPaths, Workspace

_DAILY_NOTE = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")


@dataclass
class Copied:
    """How many of each were written to the database."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, count: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + count

    def line(self) -> str:
        shown = ", ".join(f"{count} {what}" for what, count in self.counts.items() if count)
        return f"Copied into the database: {shown or 'nothing (the workspace holds none of it)'}."


async def migrate_workspace(workspace: Workspace, database: Database) -> Copied:
    copied = Copied()
    await _sessions(workspace, database, copied)
    await _memory_documents(workspace, database, copied)
    await _memory_items(workspace, database, copied)
    await _reminders(workspace, database, copied)
    await _pairing(workspace, database, copied)
    await _runtime_config(workspace, database, copied)
    await _rag_journal(workspace, database, copied)
    await _uploads(workspace, database, copied)
    await _chat_moves(workspace, database, copied)
    return copied


async def _chat_moves(workspace: Workspace, database: Database, copied: Copied) -> None:
    moves = await copy_moves_file(database, workspace.chat_moves_file)
    copied.add("chat moves", moves.records)
    copied.add("chat move lines that are not moves (skipped; see the log)", moves.skipped_lines)


async def _uploads(workspace: Workspace, database: Database, copied: Copied) -> None:
    uploads = await copy_uploads_file(database, workspace.uploads_file)
    copied.add("documents sent in chats", uploads.records)
    copied.add("documents sent in chats forgotten", uploads.forgotten)
    copied.add("upload lines that are not uploads (skipped; see the log)", uploads.skipped_lines)


async def _rag_journal(workspace: Workspace, database: Database, copied: Copied) -> None:
    journal = await copy_journal_file(database, workspace.rag_journal_file)
    copied.add("knowledge graph documents", journal.records)
    copied.add("knowledge graph documents forgotten", journal.forgotten)
    copied.add("journal lines that are not documents (skipped; see the log)", journal.skipped_lines)


async def _runtime_config(workspace: Workspace, database: Database, copied: Copied) -> None:
    text = read_text_sync(workspace.runtime_config_file)
    if text is None:
        return
    await RuntimeConfigRow(database).write(text)
    copied.add("runtime configurations")


async def _sessions(workspace: Workspace, database: Database, copied: Copied) -> None:
    folder = workspace.sessions_dir
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        session_id = path.name.removesuffix(".json")
        document = read_text_sync(path)
        if document is None:
            continue
        async with database.transaction() as connection:
            await connection.execute(
                "INSERT INTO sessions (id, document) VALUES ($1, $2)"
                " ON CONFLICT (id) DO UPDATE SET document = excluded.document, updated_at = now()",
                session_id, document,
            )  # fmt: skip
        copied.add("sessions")
    archive_dir = folder / "archive"
    for path in sorted(archive_dir.glob("*.jsonl")) if archive_dir.is_dir() else []:
        session_id = path.name.removesuffix(".jsonl")
        rows = []
        length = 0
        for line in (read_text_sync(path) or "").split("\n"):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError:
                continue  # a torn line, as the bot skips it
            length += len(line_bytes(line))
            rows.append((session_id, length, line))
        async with database.transaction() as connection:
            before = await connection.fetchval("SELECT count(*) FROM session_archive WHERE session_id = $1", session_id)
            await connection.executemany(
                "INSERT INTO session_archive (session_id, end_bytes, line) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                rows,
            )
            after = await connection.fetchval("SELECT count(*) FROM session_archive WHERE session_id = $1", session_id)
        copied.add("archived messages", int(after) - int(before))


def _memory_roots(workspace: Workspace) -> list[tuple[str, Path]]:
    roots = [(".", workspace.memory_dir)]
    for kind in (CHAT_SCOPES_DIR, USER_SCOPES_DIR):
        parent = workspace.memory_dir / kind
        if parent.is_dir():
            roots += [(f"{kind}/{child.name}", child) for child in sorted(parent.iterdir()) if child.is_dir()]
    return roots


async def _memory_documents(workspace: Workspace, database: Database, copied: Copied) -> None:
    for scope, root in _memory_roots(workspace):
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            if path.name != LONG_TERM_NAME and not _DAILY_NOTE.match(path.name):
                continue
            text = read_text_sync(path)
            if text is None:
                continue
            await MemoryDocumentRows(database, scope).write(path.name, text.encode("utf-8"))
            copied.add("MEMORY.md files" if path.name == LONG_TERM_NAME else "daily notes")


async def _memory_items(workspace: Workspace, database: Database, copied: Copied) -> None:
    items = CopiedItems()
    for scope, root in _memory_roots(workspace):
        paths = MemoryPaths(root)
        await copy_item_files(database, scope, paths.items_dir, items)
        await copy_vectors(database, VectorCache(paths.index_dir), items)
    copied.add("memory items", items.items)
    copied.add("memory item lines that are not items (kept; see the log)", items.kept_lines)
    copied.add("item vectors", items.vectors)


async def _reminders(workspace: Workspace, database: Database, copied: Copied) -> None:
    store = ReminderFile(workspace.reminders_file)
    await store.load()
    table = ReminderTable(database)
    for reminder in await store.everything():
        await table.put(reminder)
        copied.add("reminders")
    copied.add("reminder entries that cannot be read (left in the file; see the log)", store.unreadable)


async def _pairing(workspace: Workspace, database: Database, copied: Copied) -> None:
    path = pairing_file(workspace.root)
    if not path.exists():
        return
    store = PairingStore(path)
    approved, pending = await store.approved_users(), await store.pending()
    async with database.transaction() as connection:
        for user in approved:
            await connection.execute(
                "INSERT INTO pairing_approved (user_id, username, approved_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (user_id) DO UPDATE SET username = excluded.username, approved_at = excluded.approved_at",
                user.user_id, user.username, user.approved_at,
            )  # fmt: skip
        for request in pending:
            await connection.execute(
                "INSERT INTO pairing_requests (code, user_id, username, requested_at, expires_at)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                request.code, request.user_id, request.username, request.requested_at, request.expires_at,
            )  # fmt: skip
    copied.add("approved users", len(approved))
    copied.add("pairing requests", len(pending))

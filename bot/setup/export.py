"""`python -m bot export [FOLDER]`: write what the database of `BOT_DATABASE_URL` holds as a workspace's files.

Sessions (`sessions/{id}.json`) and their archives (`sessions/archive/{id}.jsonl`), MEMORY.md, the daily
notes and the item files (`items/**.jsonl`) of every memory scope, `reminders.json`, `access/pairing.json`,
`preferences/runtime-config.json`, the knowledge graph's journal `rag/documents.jsonl`, the documents sent
in chats `rag/uploads.jsonl` and the chats whose id changed `state/chat_moves.jsonl`, in the formats people
read and edit; into FOLDER, or the workspace (`BOT_WORKSPACE`) when none is given. Each file is written
whole (atomically) and replaces the one there; files the database has nothing for are left alone. The items'
vectors stay in the database (a bot on the files makes them again), and so does the knowledge graph itself
(LightRAG's tables, which hold the journal's indexed documents). Edited files go back with
`python -m bot migrate`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bot.access.pairing import ApprovedUser, PairingRequest, pairing_file
from bot.chat_move_records import write_moves_file
from bot.database.connection import Database
from bot.domain.session import checked_session_id
from bot.memory.postgres_items import write_item_files
from bot.rag.journal_table import write_journal_file
from bot.rag.upload_table import write_uploads_file
from bot.runtime_config_db import RuntimeConfigRow
from bot.scheduler.reminder_store import Reminder
from bot.storage.files import write_atomic
from bot.workspace import Workspace


@dataclass
class Written:
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, count: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + count

    def line(self, folder: Path) -> str:
        shown = ", ".join(f"{count} {what}" for what, count in self.counts.items() if count)
        return f"Written to {folder}: {shown or 'nothing (the database holds none of it)'}."


async def export_workspace(database: Database, workspace: Workspace) -> Written:
    written = Written()
    for row in await database.fetch("SELECT id, document FROM sessions ORDER BY id"):
        path = workspace.sessions_dir / f"{checked_session_id(row['id'])}.json"
        await write_atomic(path, str(row["document"]).encode("utf-8"))
        written.add("sessions")
    archived = await database.fetch("SELECT session_id, line FROM session_archive ORDER BY session_id, end_bytes")
    lines: dict[str, list[str]] = {}
    for row in archived:
        lines.setdefault(str(row["session_id"]), []).append(str(row["line"]))
    for session_id, session_lines in lines.items():
        path = workspace.sessions_dir / "archive" / f"{checked_session_id(session_id)}.jsonl"
        await write_atomic(path, "".join(line + "\n" for line in session_lines).encode("utf-8"))
        written.add("archives")
    for row in await database.fetch("SELECT scope, name, content FROM memory_documents ORDER BY scope, name"):
        folder = workspace.memory_dir if row["scope"] == "." else workspace.memory_dir / str(row["scope"])
        if not folder.resolve().is_relative_to(workspace.memory_dir.resolve()) or "/" in str(row["name"]):
            continue  # a row that would write outside memory/ (a hand edit) is not followed
        await write_atomic(folder / str(row["name"]), str(row["content"]).encode("utf-8"))
        written.add("memory documents")
    written.add("memory item files", await write_item_files(database, workspace.memory_dir))
    reminders = [
        Reminder.model_validate_json(row["reminder"]).to_json_dict()
        for row in await database.fetch("SELECT reminder FROM reminders ORDER BY due_at")
    ]
    if reminders:
        data = json.dumps(reminders, ensure_ascii=False, indent=1).encode("utf-8")
        await write_atomic(workspace.reminders_file, data)
        written.add("reminders", len(reminders))
    approved = [
        ApprovedUser(int(row["user_id"]), row["username"], row["approved_at"])
        for row in await database.fetch("SELECT * FROM pairing_approved ORDER BY approved_at")
    ]
    pending = [
        PairingRequest(str(row["code"]), int(row["user_id"]), row["username"], row["requested_at"], row["expires_at"])
        for row in await database.fetch("SELECT * FROM pairing_requests ORDER BY requested_at")
    ]
    if approved or pending:
        state = {"pending": [item.to_json() for item in pending], "approved": [item.to_json() for item in approved]}
        await write_atomic(pairing_file(workspace.root), (json.dumps(state, indent=2) + "\n").encode("utf-8"))
        written.add("approved users", len(approved))
    config = await RuntimeConfigRow(database).read()
    if config is not None:
        await write_atomic(workspace.runtime_config_file, config[1].encode("utf-8"))
        written.add("runtime configurations")
    written.add("knowledge graph documents", await write_journal_file(database, workspace.rag_journal_file))
    written.add("documents sent in chats", await write_uploads_file(database, workspace.uploads_file))
    written.add("chat moves", await write_moves_file(database, workspace.chat_moves_file))
    return written

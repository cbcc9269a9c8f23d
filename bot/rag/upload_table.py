"""`UploadTable`: the documents sent in chats in PostgreSQL (`rag_uploads`), with `BOT_DATABASE_URL`.

Every process of the database sees every upload: `/docs` and `/docs forget ID` answered by any list and
forget what any read. The same file sent twice to a chat is read once: `claim` inserts the upload's row
in a transaction that stays open while its parts are queued, so a process claiming the same key at once
waits on the key, then finds the row (or, when the first died and its transaction rolled back, reads
the file itself). A reading is watched by the process that owns its row (`owner`); when that process
is gone (its presence lock free: it stopped or died) another takes the row over (`adopt`) and goes on
editing the progress message and sends the last line.

`bot migrate` copies `rag/uploads.jsonl` into the table (`copy_uploads_file`), `bot export` writes the
table out as that file (`write_uploads_file`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.database.connection import Database, is_gone
from bot.rag.upload_records import FORGOTTEN, READING, Upload, UploadClaim
from bot.storage.files import read_text_sync
from bot.storage.jsonl import CopiedRecords, parse_numbered, write_records

_COLUMNS = (
    "session_id, id, name, channel_type, chat_id, parts, created_at, progress_message_id, status, problems, owner"
)
_INSERT = f"INSERT INTO rag_uploads ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
_ROW = "session_id = $1 AND id = $2"


class UploadTable:
    """The `rag_uploads` table, shared by every process of the database (see the module's docstring)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @property
    def _owner(self) -> str:
        return self._database.process_id

    @contextlib.asynccontextmanager
    async def claim(self, upload: Upload) -> AsyncIterator[UploadClaim]:
        async with self._database.transaction() as connection:
            while True:
                # The key decides: a second insert of it waits for this transaction, then conflicts.
                inserted = await connection.fetchval(
                    _INSERT + " ON CONFLICT (session_id, id) DO NOTHING RETURNING id", *_values(upload, self._owner)
                )
                if inserted is not None:
                    yield _TableClaim(connection, self._owner, None)
                    return
                row = await connection.fetchrow(f"SELECT {_COLUMNS} FROM rag_uploads WHERE {_ROW}", *upload.key)
                if row is not None:  # else forgotten between the two statements: claim it again
                    yield _TableClaim(connection, self._owner, _upload(row))
                    return

    async def get(self, session_id: str, upload_id: str) -> Upload | None:
        rows = await self._database.fetch(f"SELECT {_COLUMNS} FROM rag_uploads WHERE {_ROW}", session_id, upload_id)
        return _upload(rows[0]) if rows else None

    async def listed(self, session_id: str) -> list[Upload]:
        rows = await self._database.fetch(
            f"SELECT {_COLUMNS} FROM rag_uploads WHERE session_id = $1 ORDER BY position", session_id
        )
        return [_upload(row) for row in rows]

    async def settle(self, upload: Upload) -> bool:
        rows = await self._database.fetch(
            f"UPDATE rag_uploads SET status = $3, problems = $4 WHERE {_ROW} AND status = $5 AND owner = $6"
            " RETURNING id",
            *upload.key, upload.status, upload.problems, READING, self._owner,
        )  # fmt: skip
        return bool(rows)

    async def forget(self, session_id: str, upload_id: str) -> Upload | None:
        rows = await self._database.fetch(
            f"DELETE FROM rag_uploads WHERE {_ROW} RETURNING {_COLUMNS}", session_id, upload_id
        )
        if not rows:
            return None
        upload = _upload(rows[0])
        upload.status = FORGOTTEN
        return upload

    async def adopt(self, channel_types: set[str]) -> list[Upload]:
        # Each gone owner's presence lock is held for the transaction: of processes adopting at once, one
        # takes its readings.
        reading = "status = $1 AND channel_type = ANY($2::text[])"
        async with self._database.transaction() as connection:
            owners = await connection.fetch(
                f"SELECT DISTINCT owner FROM rag_uploads WHERE {reading} AND owner IS DISTINCT FROM $3",
                READING, sorted(channel_types), self._owner,
            )  # fmt: skip
            gone = [row["owner"] for row in owners if row["owner"] is None or await is_gone(connection, row["owner"])]
            if not gone:
                return []
            rows = await connection.fetch(
                f"UPDATE rag_uploads SET owner = $3 WHERE {reading} AND (owner IS NULL OR owner = ANY($4::text[]))"
                f" RETURNING position, {_COLUMNS}",
                READING, sorted(channel_types), self._owner, [owner for owner in gone if owner is not None],
            )  # fmt: skip
        return [_upload(row) for row in sorted(rows, key=lambda row: int(row["position"]))]

    async def move_chat(self, old_session_id: str, new_session_id: str, new_chat_id: str) -> int:
        async with self._database.transaction() as connection:
            moved = await connection.execute(
                "UPDATE rag_uploads AS u SET session_id = $2, chat_id = $3 WHERE session_id = $1 AND NOT EXISTS"
                " (SELECT 1 FROM rag_uploads n WHERE n.session_id = $2 AND n.id = u.id)",
                old_session_id, new_session_id, new_chat_id,
            )  # fmt: skip
        return int(moved.rsplit(" ", 1)[-1])


@dataclass
class _TableClaim:
    _connection: Any
    _owner: str
    known: Upload | None

    async def keep(self, upload: Upload) -> None:
        await self._connection.execute(
            "UPDATE rag_uploads SET name = $3, channel_type = $4, chat_id = $5, parts = $6, created_at = $7,"
            f" progress_message_id = $8, status = $9, problems = $10, owner = $11 WHERE {_ROW}",
            *_values(upload, self._owner),
        )


def _values(upload: Upload, owner: str | None) -> tuple[object, ...]:
    return (
        upload.session_id, upload.id, upload.name, upload.channel_type, upload.chat_id, upload.parts,
        upload.created_at, upload.progress_message_id, upload.status, upload.problems, owner,
    )  # fmt: skip


def _upload(row: Any) -> Upload:
    return Upload(
        id=str(row["id"]), name=str(row["name"]), session_id=str(row["session_id"]),
        channel_type=str(row["channel_type"]), chat_id=str(row["chat_id"]), parts=[str(p) for p in row["parts"]],
        created_at=str(row["created_at"]), progress_message_id=row["progress_message_id"], status=str(row["status"]),
        problems=[str(p) for p in row["problems"]],
    )  # fmt: skip


# -- moving in and out: `bot migrate` and `bot export` ---------------------------------------------------


async def copy_uploads_file(database: Database, path: Path) -> CopiedRecords:
    """Write the uploads of the file over their rows (safe to repeat): each as the file's last line for its
    chat and id says, a forgotten one's row deleted; a reading is left to the next bot that starts (no
    owner). A line that is not an upload is skipped, counted and logged with its number."""
    parsed = parse_numbered(read_text_sync(path) or "", path, Upload.from_json, "an upload")
    copied = CopiedRecords(skipped_lines=len(parsed.skipped))
    uploads = {upload.key: upload for upload in parsed.records}
    if not uploads:
        return copied
    forgotten = [upload for upload in uploads.values() if upload.status == FORGOTTEN]
    live = [upload for upload in uploads.values() if upload.status != FORGOTTEN]
    updated = ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS.replace(" ", "").split(",")[2:])
    async with database.transaction() as connection:
        await connection.executemany(f"DELETE FROM rag_uploads WHERE {_ROW}", [upload.key for upload in forgotten])
        await connection.executemany(
            _INSERT + f" ON CONFLICT (session_id, id) DO UPDATE SET {updated}", [_values(u, None) for u in live]
        )
    copied.records, copied.forgotten = len(live), len(forgotten)
    return copied


async def write_uploads_file(database: Database, path: Path) -> int:
    """Write every upload to the file at `path` (atomically), as the bot on files keeps it; how many (none:
    the file is left as it is)."""
    rows = await database.fetch(f"SELECT {_COLUMNS} FROM rag_uploads ORDER BY position")
    return await write_records(path, [_upload(row).to_json() for row in rows])

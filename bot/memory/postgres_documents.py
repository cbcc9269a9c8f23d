"""MEMORY.md and the daily notes in PostgreSQL (`BOT_DATABASE_URL`): a row of `memory_documents` per text.

Read on every message, as the files are, so an edit of a row (`UPDATE`, or `bot export` → edit →
`bot migrate`) takes effect on the next message. A note line is appended inside the database (one
statement), so replicas appending to one day's note never lose each other's lines.
"""

from __future__ import annotations

from bot.database.connection import Database


class MemoryDocumentRows:
    """One scope's texts as rows keyed by (scope, name)."""

    def __init__(self, database: Database, scope: str) -> None:
        self._database = database
        self._scope = scope

    async def read(self, name: str) -> str | None:
        rows = await self._database.fetch(
            "SELECT content FROM memory_documents WHERE scope = $1 AND name = $2", self._scope, name
        )
        return str(rows[0]["content"]) if rows else None

    async def read_many(self, names: list[str]) -> list[str | OSError | None]:
        try:
            rows = await self._database.fetch(
                "SELECT name, content FROM memory_documents WHERE scope = $1 AND name = ANY($2::text[])",
                self._scope, names,
            )  # fmt: skip
        except OSError as error:
            return [error for _ in names]
        found = {row["name"]: str(row["content"]) for row in rows}
        return [found.get(name) for name in names]

    async def write(self, name: str, text: bytes) -> None:
        async with self._database.transaction() as connection:
            await connection.execute(
                "INSERT INTO memory_documents (scope, name, content) VALUES ($1, $2, $3) ON CONFLICT (scope, name)"
                " DO UPDATE SET content = excluded.content, updated_at = now()",
                self._scope, name, text.decode("utf-8", "replace"),
            )  # fmt: skip

    async def append_line(self, name: str, line: str) -> None:
        async with self._database.transaction() as connection:
            # A text that does not end with a newline (a hand edit) gets one before the line, as a file's append.
            await connection.execute(
                "INSERT INTO memory_documents (scope, name, content) VALUES ($1, $2, $3 || E'\\n')"
                " ON CONFLICT (scope, name) DO UPDATE SET content = memory_documents.content"
                " || CASE WHEN memory_documents.content = '' OR right(memory_documents.content, 1) = E'\\n'"
                " THEN '' ELSE E'\\n' END || excluded.content, updated_at = now()",
                self._scope, name, line,
            )  # fmt: skip

    async def read_bytes(self, name: str) -> bytes:
        return (await self.read(name) or "").encode("utf-8")

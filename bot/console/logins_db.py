"""`LoginsInDatabase`: the console's login links and sessions in PostgreSQL (`BOT_DATABASE_URL`).

The tables `console_links` and `console_sessions` hold what `LoginsInMemory` would, so that every replica
sees a link or a session another made. Taking a link is one `DELETE … RETURNING`: of replicas redeeming one
link at once, one alone gets the row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.console.auth import ConsoleSession, Viewer
from bot.database.connection import Database


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _viewer_until(row: Any) -> tuple[Viewer, float]:
    """The viewer a row (of either table) names, and when it expires."""
    return Viewer(row["person"], row["owner"]), row["expires_at"].timestamp()


class LoginsInDatabase:
    """Login links and sessions as rows, by the digest of their token."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def add_link(self, key: str, viewer: Viewer, expires_at: float) -> None:
        await self._database.fetch(
            "INSERT INTO console_links (key, person, owner, expires_at) VALUES ($1, $2, $3, $4)",
            key, viewer.person, viewer.owner, _time(expires_at),
        )  # fmt: skip

    async def link(self, key: str) -> tuple[Viewer, float] | None:
        rows = await self._database.fetch("SELECT * FROM console_links WHERE key = $1", key)
        return _viewer_until(rows[0]) if rows else None

    async def take_link(self, key: str) -> tuple[Viewer, float] | None:
        rows = await self._database.fetch("DELETE FROM console_links WHERE key = $1 RETURNING *", key)
        return _viewer_until(rows[0]) if rows else None

    async def add_session(self, key: str, session: ConsoleSession) -> None:
        await self._database.fetch(
            "INSERT INTO console_sessions (key, person, owner, csrf, expires_at) VALUES ($1, $2, $3, $4, $5)",
            key, session.viewer.person, session.viewer.owner, session.csrf, _time(session.expires_at),
        )  # fmt: skip

    async def session(self, key: str) -> ConsoleSession | None:
        rows = await self._database.fetch("SELECT * FROM console_sessions WHERE key = $1", key)
        if not rows:
            return None
        viewer, expires_at = _viewer_until(rows[0])
        return ConsoleSession(viewer, expires_at, rows[0]["csrf"])

    async def end_session(self, key: str) -> None:
        await self._database.fetch("DELETE FROM console_sessions WHERE key = $1", key)

    async def drop_expired(self, now: float) -> None:
        async with self._database.transaction() as connection:
            await connection.execute("DELETE FROM console_links WHERE expires_at <= $1", _time(now))
            await connection.execute("DELETE FROM console_sessions WHERE expires_at <= $1", _time(now))

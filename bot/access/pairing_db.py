"""`PairingTables`: pairing codes and approved users in PostgreSQL (`BOT_DATABASE_URL`).

The tables `pairing_requests` and `pairing_approved` hold what `access/pairing.json` would. Each change
is one transaction that locks `pairing_requests` first, so the bots and the command line sharing the
database take turns as they do on the file's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.access.pairing import ApprovedUser, PairingError, PairingRequest, new_code, normalized_code
from bot.database.connection import Database

log = logging.getLogger(__name__)


class PairingTables:
    """Pending pairing codes and approved users, as rows."""

    def __init__(self, database: Database, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._database = database
        self._now = now

    async def approved_ids(self) -> frozenset[int]:
        rows = await self._database.fetch("SELECT user_id FROM pairing_approved")
        return frozenset(int(row["user_id"]) for row in rows)

    async def request(
        self, user_id: int, username: str | None, ttl: timedelta, max_pending: int
    ) -> PairingRequest | None:
        now = self._now()
        async with self._database.transaction() as connection:
            await connection.execute("LOCK TABLE pairing_requests IN EXCLUSIVE MODE")
            await connection.execute("DELETE FROM pairing_requests WHERE expires_at <= $1", now)
            live = [_request(row) for row in await connection.fetch("SELECT * FROM pairing_requests")]
            existing = next((item for item in live if item.user_id == user_id), None)
            if existing is not None:
                return existing
            if len(live) >= max_pending:
                return None
            request = PairingRequest(new_code({item.code for item in live}), user_id, username, now, now + ttl)
            await connection.execute(
                "INSERT INTO pairing_requests (code, user_id, username, requested_at, expires_at)"
                " VALUES ($1, $2, $3, $4, $5)",
                request.code, request.user_id, request.username, request.requested_at, request.expires_at,
            )  # fmt: skip
        return request

    async def pending(self) -> list[PairingRequest]:
        rows = await self._database.fetch(
            "SELECT * FROM pairing_requests WHERE expires_at > $1 ORDER BY requested_at", self._now()
        )
        return [_request(row) for row in rows]

    async def approve(self, code: str) -> ApprovedUser:
        wanted = normalized_code(code)
        expired = False
        async with self._database.transaction() as connection:
            await connection.execute("LOCK TABLE pairing_requests IN EXCLUSIVE MODE")
            row = await connection.fetchrow("DELETE FROM pairing_requests WHERE code = $1 RETURNING *", wanted)
            if row is None:
                raise PairingError(f"No pending pairing request has the code {wanted}")
            request = _request(row)
            expired = request.expires_at <= self._now()
            if not expired:
                user = ApprovedUser(request.user_id, request.username, self._now())
                await connection.execute(
                    "INSERT INTO pairing_approved (user_id, username, approved_at) VALUES ($1, $2, $3)"
                    " ON CONFLICT (user_id) DO UPDATE SET username = excluded.username,"
                    " approved_at = excluded.approved_at",
                    user.user_id, user.username, user.approved_at,
                )  # fmt: skip
        if expired:  # the expired request is gone (committed), as the file drops it
            raise PairingError(f"The code {wanted} has expired; ask the user to write to the bot again")
        log.info("[Access] Approved user %d (@%s) with a pairing code", user.user_id, user.username or "-")
        return user


def _request(row: Any) -> PairingRequest:
    return PairingRequest(
        str(row["code"]), int(row["user_id"]), row["username"], row["requested_at"], row["expires_at"]
    )

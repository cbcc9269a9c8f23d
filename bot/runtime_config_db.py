"""The runtime configuration in PostgreSQL, when `BOT_DATABASE_URL` is set: one row holding the text of
`runtime-config.json`, read as the file is (same validation, a bad key refused alone, the last good
configuration kept), and a version each write raises. Every process polls the version, so a change made by
one (the console's settings, a hand edit of the row) reaches all of them within `POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from bot.database.connection import Database, DatabaseError, _driver
from bot.runtime_config import RuntimeConfigStore

log = logging.getLogger(__name__)

# How often each process asks for the row's version: one indexed read of one row.
POLL_SECONDS = 1.0
CONNECT_TIMEOUT_SECONDS = 10.0

_WRITE = (
    "INSERT INTO runtime_config (id, document) VALUES (true, $1)"
    " ON CONFLICT (id) DO UPDATE SET document = excluded.document, version = runtime_config.version + 1,"
    " updated_at = now() WHERE runtime_config.document IS DISTINCT FROM excluded.document"
    " RETURNING version"
)


def read_row_at_start(url: str) -> tuple[int, str] | None:
    """The row (version, text) as the database holds it before the bot is built (synchronous: construction
    is); None when there is none yet, or the database cannot be read now (its start says why)."""
    found: list[tuple[int, str] | None] = [None]

    async def read() -> None:
        asyncpg = _driver()
        connection = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            row = await connection.fetchrow("SELECT version, document FROM runtime_config WHERE id")
        except asyncpg.UndefinedTableError:
            row = None  # a database the migrations have not reached yet
        finally:
            await connection.close()
        found[0] = None if row is None else (int(row["version"]), str(row["document"]))

    def run() -> None:
        try:
            asyncio.run(read())
        except Exception as error:  # whatever the driver raises: the database's start reports it
            log.warning("[Config] Could not read the runtime configuration from the database: %s", error)

    # Its own thread and loop: construction may run inside an event loop that cannot be re-entered.
    thread = threading.Thread(target=run, name="runtime-config read")
    thread.start()
    thread.join()
    return found[0]


class RuntimeConfigRow:
    """The row of `database`: written by `write`, followed by `follow` (a task run while the database is open)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def read(self) -> tuple[int, str] | None:
        rows = await self._database.fetch("SELECT version, document FROM runtime_config WHERE id")
        return None if not rows else (int(rows[0]["version"]), str(rows[0]["document"]))

    async def write(self, text: str) -> int:
        """Store `text`; the version it has now (unchanged when the text is)."""
        async with self._database.transaction() as connection:
            version: Any = await connection.fetchval(_WRITE, text)
            if version is None:  # the same text: nothing written
                version = await connection.fetchval("SELECT version FROM runtime_config WHERE id")
        return int(version)

    async def follow(self, store: RuntimeConfigStore) -> None:
        """Hand `store` each new version of the row, polled every `POLL_SECONDS`, until cancelled."""
        version: int | None = None
        failing = False
        while True:
            try:
                rows = await self._database.fetch("SELECT version FROM runtime_config WHERE id")
                now = int(rows[0]["version"]) if rows else None
                if now != version:
                    row = await self.read()
                    version = None if row is None else row[0]
                    store.follow_row(row)
                failing = False
            except DatabaseError as error:
                if not failing:  # one line per outage, not one per poll
                    log.warning(
                        "[Config] Could not read the runtime configuration from the database (the last one read "
                        "stays in force): %s",
                        error,
                    )
                failing = True
            await asyncio.sleep(POLL_SECONDS)

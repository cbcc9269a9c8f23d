"""The schema's versioned migrations: plain SQL files `NNNN_name.sql` beside this module, applied in order.

Each is applied once, in its own transaction with its row in `schema_migrations`, so a crash half way
through one leaves the schema as it was before it. Processes starting together take turns under a
PostgreSQL advisory lock. A database migrated by a newer bot (a version this one does not have) is
refused: this bot would not know its tables.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

log = logging.getLogger(__name__)

# The advisory lock's key: any number no other user of the database takes ("bot-mig" in ASCII).
MIGRATION_LOCK_KEY = 0x626F742D6D6967
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class SchemaTooNew(Exception):
    """The database holds migrations this bot does not have."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The package's migrations, by version."""
    found: list[Migration] = []
    for entry in resources.files(__package__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is not None:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda migration: migration.version)


async def apply_migrations(connection: Any) -> list[int]:
    """Apply what the database lacks, in order; the versions applied now."""
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {int(row["version"]) for row in await connection.fetch("SELECT version FROM schema_migrations")}
        known = migrations()
        unknown = applied - {migration.version for migration in known}
        if unknown:
            raise SchemaTooNew(
                f"the database's schema has migration {max(unknown)}, newer than this bot's newest "
                f"({known[-1].version if known else 0}): run the newer bot, or point BOT_DATABASE_URL elsewhere"
            )
        done: list[int] = []
        for migration in known:
            if migration.version in applied:
                continue
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
                )
            log.info("[Database] Applied migration %04d_%s", migration.version, migration.name)
            done.append(migration.version)
        return done
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)

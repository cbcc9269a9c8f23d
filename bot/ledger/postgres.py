"""The turn ledger's records as rows of PostgreSQL (`BOT_DATABASE_URL`): `ledger_seen` and `ledger_turns`.

A transport key is a row of `ledger_seen` (unique per channel), a turn a row of `ledger_turns` whose
columns say how far it got (its reply once answered, `delivered_at` once delivered). Each append is one
transaction: all its records are kept or none. A transport key is claimed by one insert, so of the
processes sharing the tables that are handed the same update, one answers it. Reading gives back the
records the ledger loads from, as the file would after a compaction: the newest keys, the newest
delivered turns, the open ones.

A claimed key names its claimer (`owner`) until the key is kept: its turn recorded, or its update
settled without one (`seen`). A claimer killed in between leaves a claim whose presence lock is free;
the redelivery of that update (Telegram sends it again, it got no answer) takes the claim over, so the
message is answered, once.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from bot.database.connection import Database, is_gone
from bot.ledger.store import REMEMBERED_KEYS, Record

log = logging.getLogger(__name__)


class LedgerTables:
    """The ledger's records in PostgreSQL."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @property
    def name(self) -> str:
        return "PostgreSQL (ledger_seen, ledger_turns)"

    @property
    def legacy_state(self) -> Path | None:
        return None

    @property
    def shared(self) -> bool:
        return True

    async def claim(self, channel_type: str, key: str) -> bool:
        # The primary key decides: of processes inserting the same key at once, one gets the row back. A row
        # still claimed (owner set) by a process that is gone (its presence lock free) is taken over: that
        # process died before it kept what the key brought, and this redelivery is the only copy left.
        async with self._database.transaction() as connection:
            inserted = await connection.fetchval(
                "INSERT INTO ledger_seen (channel_type, key, owner) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
                " RETURNING true",
                channel_type,
                key,
                self._database.process_id,
            )
            if inserted:
                return True
            owner = await connection.fetchval(
                "SELECT owner FROM ledger_seen WHERE channel_type = $1 AND key = $2 FOR UPDATE", channel_type, key
            )
            if owner is None or owner == self._database.process_id:
                return False
            if not await is_gone(connection, owner):
                return False  # its claimer runs: it records the key's turn, or settles it
            await connection.execute(
                "UPDATE ledger_seen SET owner = $3 WHERE channel_type = $1 AND key = $2",
                channel_type,
                key,
                self._database.process_id,
            )
        log.info("[Ledger] Update %s was claimed by a process that is gone before it was kept; taken over", key)
        return True

    async def waits_behind(self, turn_id: str, channel_type: str, chat_id: str) -> str | None:
        """The process that runs and holds an older turn of the same chat not delivered yet (it answers that
        one first), or None. A turn of a process that is gone is not waited for (another takes it over),
        nor one of this process (its chat's queue keeps them in order)."""
        async with self._database.transaction() as connection:
            owners = await connection.fetch(
                "SELECT DISTINCT older.owner FROM ledger_turns older WHERE older.delivered_at IS NULL"
                " AND older.seq < (SELECT seq FROM ledger_turns WHERE turn_id = $1)"
                " AND older.received->>'channel_type' = $2 AND older.received->>'chat_id' = $3"
                " AND older.owner IS NOT NULL AND older.owner <> $4",
                turn_id,
                channel_type,
                chat_id,
                self._database.process_id,
            )
            for row in owners:
                # Its presence lock held: the process runs (a lock taken here is let go with the transaction).
                if not await is_gone(connection, row["owner"]):
                    return str(row["owner"])
        return None

    async def read(self) -> list[Record]:
        async with self._database.transaction() as connection:
            keys = await connection.fetch(
                # A key still claimed is left out: its claimer may be gone, and then a redelivery takes it over.
                "SELECT channel_type, key FROM (SELECT channel_type, key, seq FROM ledger_seen WHERE owner IS NULL"
                " ORDER BY seq DESC LIMIT $1) newest ORDER BY seq",
                REMEMBERED_KEYS,
            )
            delivered = await connection.fetch(
                "SELECT turn_id FROM (SELECT turn_id, delivered_at, seq FROM ledger_turns"
                " WHERE delivered_at IS NOT NULL ORDER BY delivered_at DESC, seq DESC LIMIT $1) newest"
                " ORDER BY delivered_at, seq",
                REMEMBERED_KEYS,
            )
        records: list[Record] = []
        if keys:
            records.append({"seen": [[row["channel_type"], row["key"]] for row in keys]})
        records.extend({"delivered": row["turn_id"]} for row in delivered)
        return records + await self.adopt()

    async def adopt(self) -> list[Record]:
        # Each gone owner's presence lock is held for the transaction: of processes adopting at once, one
        # takes its turns.
        async with self._database.transaction() as connection:
            owners = await connection.fetch(
                "SELECT DISTINCT owner FROM ledger_turns WHERE delivered_at IS NULL AND owner IS DISTINCT FROM $1",
                self._database.process_id,
            )
            gone: list[str | None] = []
            for row in owners:
                owner = row["owner"]
                if owner is None or await is_gone(connection, owner):
                    gone.append(owner)
            if not gone:
                return []
            open_turns = await connection.fetch(
                "UPDATE ledger_turns SET owner = $1 WHERE delivered_at IS NULL"
                " AND (owner IS NULL OR owner = ANY($2::text[])) RETURNING turn_id, received, reply, seq",
                self._database.process_id,
                [owner for owner in gone if owner is not None],
            )
        records: list[Record] = []
        for row in sorted(open_turns, key=lambda row: int(row["seq"])):
            received = json.loads(row["received"])
            if isinstance(received, dict):
                received["journal_id"] = row["turn_id"]
            records.append({"received": received})
            if row["reply"] is not None:
                records.append({"answered": row["turn_id"], "reply": row["reply"]})
        return records

    async def append(self, records: list[Record], durable: bool) -> None:
        async with self._database.transaction() as connection:
            if not durable:
                # A power cut may lose a delivery mark (the reply would go again); a crash of this process may not.
                await connection.execute("SET LOCAL synchronous_commit = off")
            for record in records:
                await _write(connection, record, self._database.process_id)

    async def compact(self, still_asked: list[Record]) -> None:
        # Other processes may share the tables: what is dropped is by age, never "all but what this one holds".
        async with self._database.transaction() as connection:
            await connection.execute(
                "DELETE FROM ledger_seen WHERE seq <= (SELECT seq FROM ledger_seen ORDER BY seq DESC"
                " OFFSET $1 LIMIT 1)",
                REMEMBERED_KEYS,
            )
            await connection.execute(
                "DELETE FROM ledger_turns WHERE delivered_at IS NOT NULL AND seq <= (SELECT seq FROM ledger_turns"
                " WHERE delivered_at IS NOT NULL ORDER BY seq DESC OFFSET $1 LIMIT 1)",
                REMEMBERED_KEYS,
            )


async def _write(connection: Any, record: Record, owner: str) -> None:
    if isinstance(record.get("seen"), list):
        keys = [key for key in record["seen"] if isinstance(key, list) and len(key) == 2]
        await _remember(connection, [str(key[0]) for key in keys], [str(key[1]) for key in keys])
    elif isinstance(record.get("received"), dict):
        received = record["received"]
        await connection.execute(
            "INSERT INTO ledger_turns (turn_id, received, owner) VALUES ($1, $2::jsonb, $3) ON CONFLICT (turn_id)"
            " DO UPDATE SET received = excluded.received, reply = NULL, delivered_at = NULL, owner = excluded.owner",
            str(received["journal_id"]),
            json.dumps(received, ensure_ascii=False),
            owner,
        )
        if received.get("dedup_key") is not None:
            await _remember(connection, [str(received["channel_type"])], [str(received["dedup_key"])])
    elif "edited" in record:
        await connection.execute(
            "UPDATE ledger_turns SET received = jsonb_set(received, '{text}', to_jsonb($2::text))"
            " WHERE turn_id = $1 AND delivered_at IS NULL",
            str(record["edited"]),
            str(record.get("text", "")),
        )
    elif "answered" in record:
        await connection.execute(
            "UPDATE ledger_turns SET reply = $2 WHERE turn_id = $1 AND delivered_at IS NULL",
            str(record["answered"]),
            str(record.get("reply", "")),
        )
    elif "delivered" in record:
        await connection.execute(
            "UPDATE ledger_turns SET delivered_at = now() WHERE turn_id = $1 AND delivered_at IS NULL",
            str(record["delivered"]),
        )
    elif "held" in record or "released" in record:
        # An update held back (a photo of a group's album waiting for the one that names the bot) stays in the
        # memory of the process given it: the album's other photos may reach another process anyway.
        return
    else:
        log.warning("[Ledger] Not kept: a record of no known kind (%s)", ", ".join(sorted(record)))


async def _remember(connection: Any, channel_types: list[str], keys: list[str]) -> None:
    # Kept: a key claimed before is settled (owner NULL), never taken over from now on.
    await connection.execute(
        "INSERT INTO ledger_seen (channel_type, key) SELECT * FROM unnest($1::text[], $2::text[])"
        " ON CONFLICT (channel_type, key) DO UPDATE SET owner = NULL WHERE ledger_seen.owner IS NOT NULL",
        channel_types,
        keys,
    )

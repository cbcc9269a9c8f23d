"""A process that records turns in a ledger store until it is killed: `python -m tests.ledger.store_child KIND WHERE`.

KIND is `files` (WHERE: the ledger's file) or `postgres` (WHERE: the database's URL). It prints `ready`
once the first batch is kept, then appends batches of `BATCH` turns, each with one `append`, forever.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.database.connection import Database
from bot.domain.inbound import InboundMessage
from bot.ledger.postgres import LedgerTables
from bot.ledger.records import received_record
from bot.ledger.store import LedgerFile, LedgerStore

BATCH = 50


async def main(kind: str, where: str) -> None:
    database = Database(where) if kind == "postgres" else None
    store: LedgerStore
    if database is not None:
        await database.start()
        store = LedgerTables(database)
    else:
        store = LedgerFile(Path(where))
    number = 0
    while True:
        records = []
        for _ in range(BATCH):
            number += 1
            inbound = InboundMessage("telegram", "9", "7", f"batch message {number}", dedup_key=f"k{number}")
            records.append({"received": received_record(f"crash-{number}", inbound)})
        await store.append(records, durable=True)
        if number == BATCH:
            print("ready", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

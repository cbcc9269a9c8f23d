"""Memory items: PostgreSQL beside SQLite, at 100,000 items (or the sizes given).

For each size, the items and vector cache `bench.memory_retrieval --prepare` writes, measured twice with
the same queries (the same seed) by `bench.memory_retrieval`'s measure, each in a process of its own so
that its resident memory is that store's alone:

- files: the workspace's JSONL files and their SQLite index (a restart, after a first start built it);
- database: the same files copied into a throw-away PostgreSQL with pgvector (the tests' server) by
  `bot migrate`'s copy (timed), then a process with its items there, as a `bot run` with
  `BOT_DATABASE_URL` has them: its start reads every row into its own copy, and every message first asks
  the database which files changed.

Printed per store: the first answer after the start and when memory was ready, `build_prompt` p50 (the
query's vector made by the bundled model), retrieval p50 (the vector made beforehand), lexical p50 (no
vectors), and the resident memory (RSS). `--json` adds one JSON line per store.

Run: `.venv/bin/python -m bench.database_items [sizes...] [--json]`
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.memory_retrieval import measure_async
from bot.database.connection import Database
from bot.memory.postgres_items import ItemRowsInDatabase
from bot.setup.migrate import migrate_workspace
from bot.workspace import Workspace
from tests.postgres_server import create_database, running_server

SIZES = (100_000,)


async def migrate_async(root: Path, url: str) -> dict[str, float]:
    database = Database(url)
    await database.start()
    started = time.perf_counter()
    try:
        copied = await migrate_workspace(Workspace(root), database)
    finally:
        await database.close()
    return {"migrate_s": time.perf_counter() - started, "copied_items": copied.counts.get("memory items", 0)}


async def measure_on_database(count: int, root: Path, url: str) -> dict[str, float | str]:
    database = Database(url)
    await database.start()
    items = ItemRowsInDatabase(database)
    try:
        return await measure_async(count, root, items)
    finally:
        items.close()
        await database.close()


def step(*args: str) -> dict[str, float | str]:
    output = subprocess.run([sys.executable, "-m", *args], check=True, capture_output=True, text=True).stdout.strip()
    return dict(json.loads(output.splitlines()[-1])) if output else {}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] in ("--migrate", "--one"):
        count, folder, url = int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
        if sys.argv[1] == "--migrate":
            print(json.dumps(asyncio.run(migrate_async(folder, url))))
        else:
            print(json.dumps(asyncio.run(measure_on_database(count, folder, url))))
        return
    as_json = "--json" in sys.argv[1:]
    sizes = [int(arg) for arg in sys.argv[1:] if arg != "--json"] or list(SIZES)
    print(
        f"{'items':>8} {'store':>9} {'1st answer':>10} {'ready':>7} {'p50':>8} {'retr p50':>8} {'lexical':>8} "
        f"{'RSS':>8}   (migrate)"
    )
    with running_server() as server:
        for size in sizes:
            with tempfile.TemporaryDirectory() as directory:
                step("bench.memory_retrieval", "--prepare", str(size), directory)
                step("bench.memory_retrieval", "--cold", str(size), directory)
                rows = {"files": step("bench.memory_retrieval", "--one", str(size), directory)}
                url = create_database(server, f"items_{size}")
                migrated = step("bench.database_items", "--migrate", str(size), directory, url)
                rows["database"] = step("bench.database_items", "--one", str(size), directory, url)
            for store, row in rows.items():
                note = f"   {migrated['migrate_s']:.1f} s for {migrated['copied_items']}" if store == "database" else ""
                print(
                    f"{size:>8} {store:>9} {row['first_ms']:>7.0f} ms {row['ready_s']:>5.1f} s "
                    f"{row['p50_ms']:>5.1f} ms {row['retrieval_p50_ms']:>5.1f} ms {row['lexical_p50_ms']:>5.1f} ms "
                    f"{row['rss_mib']:>4.0f} MiB{note}"
                )
                if as_json:
                    print(json.dumps({"bench": "database_items", "store": store, **row, **migrated}), flush=True)


if __name__ == "__main__":
    main()

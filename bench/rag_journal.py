"""The knowledge graph's journal: `rag/documents.jsonl` (one process) against PostgreSQL's `rag_documents`
(shared by every replica, with `BOT_DATABASE_URL`).

The same `RagService` runs the same exchanges on each journal, with a backend that indexes at once (so the
figures are the journal's: its writes, its claims, its reads), the table on a throw-away PostgreSQL started
for the run (`tests/postgres_server.py`: 127.0.0.1, fsync off as in the tests: the cost of the statements
and the round trips, not of a disk). Per journal: the median and p99 of queueing an exchange (after each
reply), of the graphs a chat's retrieval reads (its own when it holds anything, and any holding what it had
under an earlier id; before each retrieval), of `/status`'s counts, and of forgetting an exchange by its
message id; and the time to index the queue (`flush_all`, batches of a chat's exchanges).

Run: `.venv/bin/python -m bench.rag_journal [--exchanges 1000] [--forgets 50] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.rag.journal_table import RagJournalTable
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore, RagJournal
from bot.settings import RuntimeConfig
from tests.postgres_server import create_database, running_server
from tests.rag.test_store import ScriptedBackend

CONFIG = RuntimeConfig.model_validate({"rag": {"minExchangeChars": 10}, "memory": {"scope": "chat"}})
CHATS = 10
START = datetime(2026, 1, 1, tzinfo=UTC)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def timed(calls: list[Callable[[], Awaitable[object]]]) -> tuple[float, float]:
    """Median and p99, in ms, of running each call once."""
    spent = []
    for call in calls:
        started = time.perf_counter()
        await call()
        spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(spent), percentile(spent, 0.99)


async def figures(journal: RagJournal, exchanges: int, forgets: int) -> dict[str, float]:
    service = RagService(journal, ScriptedBackend(), lambda: CONFIG, TokenEstimator())
    results: dict[str, float] = {}

    def queue(number: int) -> Callable[[], Awaitable[object]]:
        user = f"Note {number}: the locker code of box {number} is {number * 7919 % 10000:04d}, keep it."
        at = START + timedelta(seconds=number)
        return lambda: service.enqueue(CONFIG, f"bench:{number % CHATS}", at, user, "Noted.", [f"u{number}"])

    results["enqueue_p50_ms"], results["enqueue_p99_ms"] = await timed([queue(n) for n in range(exchanges)])
    started = time.perf_counter()
    indexed = await service.flush_all()
    results["flush_all_ms"] = (time.perf_counter() - started) * 1000
    assert indexed == exchanges, indexed
    results["graphs_read_p50_ms"], results["graphs_read_p99_ms"] = await timed(
        [lambda: journal.graphs_read("chat_bench_1", "bench:1")] * 200
    )
    results["status_p50_ms"], results["status_p99_ms"] = await timed([service.status] * 50)

    def forget(number: int) -> Callable[[], Awaitable[object]]:
        async def run() -> None:
            await service.forget_documents(await service.documents_for_messages([f"u{number}"]))

        return run

    # Each forget deletes its batch's document, and the batch's other exchanges are indexed again.
    step = max(1, exchanges // forgets)
    results["forget_p50_ms"], results["forget_p99_ms"] = await timed(
        [forget(n) for n in range(0, exchanges, step)][:forgets]
    )
    await service.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--exchanges", type=int, default=1000)
    parser.add_argument("--forgets", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as folder:
        journal = RagDocumentStore(Path(folder) / "rag" / "documents.jsonl")
        results["files"] = await figures(journal, arguments.exchanges, arguments.forgets)
        database = Database(await asyncio.to_thread(create_database, server, "bench"))
        await database.start()
        try:
            table = RagJournalTable(database, lambda: CONFIG.rag)
            results["postgres"] = await figures(table, arguments.exchanges, arguments.forgets)
        finally:
            await database.close()
    if arguments.json:
        print(json.dumps(results))
        return
    keys: list[str] = list(results["files"])
    print(f"{'':22} {'files':>10} {'postgres':>10}")
    for key in keys:
        row: dict[str, Any] = {name: results[name][key] for name in results}
        print(f"{key:22} {row['files']:10.2f} {row['postgres']:10.2f}")


if __name__ == "__main__":
    asyncio.run(main())

"""What following a document's reading costs a round: on `rag/uploads.jsonl` and `rag/documents.jsonl` (one
process), and on PostgreSQL's `rag_uploads` and `rag_documents` (shared by every replica).

`DocumentReader` asks, every half second while a document is read, for its upload (forgotten by another
replica meanwhile?) and for the states of its parts. A document of 10, 100 and 1,000 parts is queued on
each journal; then, rounds in turn, the parts' states read one statement a part (`RagJournal.get` each)
and all at once (`RagJournal.statuses`), and the upload read from its record. The table on a throw-away
PostgreSQL started for the run (`tests/postgres_server.py`: 127.0.0.1, fsync off as in the tests: the
cost of the statements and the round trips, not of a disk). Medians in ms, and the ratio of a part at a
time to all at once.

Run: `.venv/bin/python -m bench.upload_watch [--parts 10 100 1000] [--rounds 20] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.rag.journal_table import RagJournalTable
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore, RagJournal
from bot.rag.upload_records import Upload, UploadFile, UploadRecords
from bot.rag.upload_table import UploadTable
from bot.settings import RuntimeConfig
from tests.postgres_server import create_database, running_server
from tests.rag.test_store import ScriptedBackend

CONFIG = RuntimeConfig.model_validate({"memory": {"scope": "chat"}})
AT = datetime(2026, 1, 1, tzinfo=UTC)
SESSION = "bench:1"


async def figures(journal: RagJournal, records: UploadRecords, sizes: list[int], rounds: int) -> dict[str, float]:
    service = RagService(journal, ScriptedBackend(), lambda: CONFIG, TokenEstimator())
    results: dict[str, float] = {}
    for size in sizes:
        upload = Upload(f"file_{size:012d}", "report.txt", SESSION, "bench", "1", [], AT.isoformat())
        async with records.claim(upload) as claim:
            for number in range(1, size + 1):
                text = f"Document report.txt, part {number} of {size}:\nSection {number} " + "words " * 600
                queued = await service.enqueue_part(CONFIG, SESSION, f"{upload.id}_{number:05d}", text, AT)
                upload.parts.append(queued.id)
            await claim.keep(upload)
        one_by_one, at_once, record = [], [], []
        for _ in range(rounds):
            started = time.perf_counter()
            states = [doc.status if (doc := await journal.get(part)) else "forgotten" for part in upload.parts]
            one_by_one.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            known = await journal.statuses(upload.parts)
            at_once.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await records.get(SESSION, upload.id)
            record.append((time.perf_counter() - started) * 1000)
            assert states == [known.get(part, "forgotten") for part in upload.parts] == ["queued"] * size
        results[f"parts_{size}_one_by_one_ms"] = statistics.median(one_by_one)
        results[f"parts_{size}_at_once_ms"] = statistics.median(at_once)
        results[f"parts_{size}_ratio"] = statistics.median(one_by_one) / statistics.median(at_once)
        results[f"parts_{size}_upload_ms"] = statistics.median(record)
    await service.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--parts", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as folder:
        rag = Path(folder) / "rag"
        files = RagDocumentStore(rag / "documents.jsonl"), UploadFile(rag / "uploads.jsonl")
        results["files"] = await figures(*files, arguments.parts, arguments.rounds)
        database = Database(await asyncio.to_thread(create_database, server, "bench"))
        await database.start()
        try:
            tables = RagJournalTable(database, lambda: CONFIG.rag), UploadTable(database)
            results["postgres"] = await figures(*tables, arguments.parts, arguments.rounds)
        finally:
            await database.close()
    if arguments.json:
        print(json.dumps(results))
        return
    print(f"{'':30} {'files':>10} {'postgres':>10}")
    for key in results["files"]:
        print(f"{key:30} {results['files'][key]:10.2f} {results['postgres'][key]:10.2f}")


if __name__ == "__main__":
    asyncio.run(main())

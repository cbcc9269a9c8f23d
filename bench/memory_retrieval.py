"""Memory retrieval at scale: 1,000 / 10,000 / 100,000 items, with the offline embedder on.

For each size, three processes (so each figure is that step's own, resident memory included):

1. `--prepare`: synthetic items written as the bot writes them (a year of episodic day files, plus
   semantic and procedural files), and the vector cache beside them as a previous run would have
   left it. Embedding 100,000 texts with the bundled model takes about half an hour on 2 cores,
   once; the bench measures what every later start pays, so it stores seeded random unit vectors
   under the real embedder's name and the items' text keys (search cost and memory do not depend
   on the values).
2. `--cold`: the first start, which builds the index database (`memory/index/items.sqlite3`) from
   the files: its first answer and when memory was ready.
3. `--one`: a restart, through `MemoryService` (the read path a message takes, the real embedder
   making each query's vector):
   - the first `build_prompt` after the start (what the first message waits for), and when the
     warm-up (BM25 index, vectors from the cache) was done;
   - a restart re-reads and re-embeds nothing: files read and items embedded during the run (0, 0);
   - per-message latency of `build_prompt` (change check of the files, the query's vector, hybrid
     scoring, the prompt pack), p50 and p99 over 300 queries, with the CPU time per query (all
     threads: on a shared machine the wall time includes waiting for a core); the same with the
     query's vector made beforehand (retrieval itself: the figure the 15 ms target of issue 14
     is about), the vector alone, and without vectors (lexical only);
   - resident memory (RSS) after loading and after the queries (the larger), and the
     interpreter's own at the process start.

Run: `.venv/bin/python -m bench.memory_retrieval [sizes...]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import numpy as np

from bot.clock import Clock
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.domain.text import fingerprint_of
from bot.llm.client import LlmClient
from bot.llm.local_embeddings import LocalEmbedder
from bot.memory.embeddings import text_key
from bot.memory.items_store import MemoryItemStore
from bot.memory.scopes import ItemsInDatabase, MemoryScope
from bot.memory.service import MemoryService
from bot.memory.vector_cache import VectorCache
from bot.settings import MemoryConfig
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths, Workspace

SIZES = (1_000, 10_000, 100_000)
QUERIES = 300
DAYS = 365
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
DIMENSIONS = 384

TOPICS = (
    "docker compose deploy nginx reverse proxy certificate renewal staging server logs restart policy "
    "python virtualenv pytest fixture asyncio event loop timeout retry backoff postgres index vacuum "
    "migration schema backup cron schedule tea coffee breakfast recipe pasta garden tomatoes watering "
    "bicycle repair tyre chain brakes holiday flight hotel booking passport visa museum train ticket "
    "birthday present sister brother parents dinner restaurant budget invoice tax return salary rent "
    "running marathon training knee injury doctor appointment dentist medicine allergy pollen weather "
    "book novel chapter reading list podcast episode music concert guitar lesson piano practice song "
    "kubernetes cluster helm chart pod memory limit cpu quota alert grafana dashboard prometheus metric"
).split()
FILLER = "i we the a to and of it is was that for on with about my your this can should would".split()


def sentence(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(TOPICS) if rng.random() < 0.45 else rng.choice(FILLER) for _ in range(words)]
    return " ".join(chosen).capitalize() + "."


def make_items(count: int, rng: random.Random, now: datetime = NOW) -> dict[str, list[MemoryItem]]:
    """`count` items: 80% episodic turns over the year before `now`, 15% semantic facts, 5% procedures."""
    files: dict[str, list[MemoryItem]] = {}
    paths = MemoryPaths(Path("."))
    for number in range(count):
        roll = rng.random()
        at = now - timedelta(days=rng.randrange(DAYS), minutes=rng.randrange(1440))
        if roll < 0.80:
            layer, kind = MemoryLayer.EPISODIC, "turn"
            content = f"User: {sentence(rng, 14)} | Assistant: {sentence(rng, 30)}"
            name = paths.episodic_file(at.date()).relative_to(paths.root).as_posix()
        elif roll < 0.95:
            layer, kind, content, name = MemoryLayer.SEMANTIC, "fact", sentence(rng, 10), "items/semantic.jsonl"
        else:
            layer, kind, content, name = MemoryLayer.PROCEDURAL, "command", sentence(rng, 16), "items/procedural.jsonl"
        item = MemoryItem(
            id=f"m{number:011d}",
            layer=layer,
            type=kind,
            content=content,
            created_at=at,
            updated_at=at,
            confidence=round(rng.uniform(0.5, 1.0), 2),
            salience=round(rng.uniform(0.2, 0.9), 2),
            fingerprint=fingerprint_of(content),
            source="telegram:1",
        )
        files.setdefault(name, []).append(item)
    return files


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fill_vector_cache(root: Path, items: list[MemoryItem], rng: random.Random) -> None:
    """The cache a previous run of the bot would have left: one vector per distinct text."""
    keys = sorted({text_key(item.content) for item in items})
    generator = np.random.default_rng(rng.randrange(1 << 30))
    vectors = generator.standard_normal((len(keys), DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cache = VectorCache(MemoryPaths(root).index_dir)
    cache.store_sync(LocalEmbedder.name, dict(zip(keys, vectors.astype(np.float16), strict=True)))
    cache.close_sync()


class EmbeddedCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.embedded = 0

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"Embedded (\d+) items", record.getMessage())
        if found:
            self.embedded += int(found[1])


async def timed_retrieval(
    service: MemoryService,
    config: MemoryConfig,
    scope: MemoryScope,
    rng: random.Random,
    vector_ms: list[float],
    cpu: list[float],
) -> list[float]:
    """`build_prompt` with the query's vector made beforehand: what retrieval itself costs (the time the
    vector took goes to `vector_ms`, the CPU time of each `build_prompt`, every thread, to `cpu`)."""
    timings = []
    embedder = service.embedder(config)
    assert embedder is not None
    for _ in range(QUERIES):
        text = sentence(rng, 12)
        began = time.perf_counter()
        await embedder.embed_query(text)  # kept by the embedder: build_prompt finds it made
        vector_ms.append((time.perf_counter() - began) * 1000)
        began, began_cpu = time.perf_counter(), time.process_time()
        await service.build_prompt(config, "telegram:1", text)
        timings.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
    timings.sort()
    return timings


async def timed_queries(
    service: MemoryService, config: MemoryConfig, rng: random.Random, cpu: list[float] | None = None
) -> list[float]:
    """Wall times of `build_prompt`, sorted; with `cpu`, also the CPU time of the process (every thread)
    per query, which on a shared machine says what the work costs when the wall time says how long
    it waited for a core."""
    timings = []
    for _ in range(QUERIES):
        text = sentence(rng, 12)
        began, began_cpu = time.perf_counter(), time.process_time()
        await service.build_prompt(config, "telegram:1", text)
        timings.append((time.perf_counter() - began) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - began_cpu) * 1000)
    timings.sort()
    return timings


def prepare(count: int, folder: Path) -> None:
    """Write `count` items and the vector cache a previous run would have left (in its own process, so
    the measuring process's resident memory is the bot's alone)."""
    rng = random.Random(count)
    memory = folder / "memory"
    everything: list[MemoryItem] = []
    for name, items in make_items(count, rng).items():
        path = memory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(dumps_line(item.to_json_dict()) + "\n" for item in items))
        everything += items
    fill_vector_cache(memory, everything, rng)


async def start(
    root: Path, config: MemoryConfig, items_in_database: ItemsInDatabase | None = None
) -> tuple[MemoryService, float, float]:
    """A new `MemoryService` as the bot makes it at start (its items in `items_in_database`, when given):
    (service, first answer ms, memory ready s)."""
    started = time.perf_counter()
    # The owner (user 1) asks: the workspace's memory is theirs.
    service = MemoryService(
        Workspace(root), Clock(UTC), cast(LlmClient, None), allowed_users=lambda: [1],
        items_in_database=items_in_database,
    )  # fmt: skip
    service.warm_up(config)
    await asyncio.sleep(0)  # as in the bot: the warm-up has begun before the first message comes
    await service.build_prompt(config, "telegram:1", "what did we plan for the garden?")
    first_ms = (time.perf_counter() - started) * 1000
    await service.settle()
    return service, first_ms, time.perf_counter() - started


async def cold_start_async(root: Path) -> dict[str, float]:
    """The first start on the files `prepare` wrote: the index database is built from them."""
    service, first_ms, ready_s = await start(root, MemoryConfig())
    await service.close()
    return {"cold_first_ms": first_ms, "cold_ready_s": ready_s}


async def measure_async(
    count: int, root: Path, items_in_database: ItemsInDatabase | None = None
) -> dict[str, float | str]:
    """A restart (a new process finding the index database the cold start built, or with
    `items_in_database` a process reading the items from there): the first answer, what it re-read and
    re-embedded, latency and resident memory."""
    rng = random.Random(count + 1)
    baseline = rss_kib()
    counter = EmbeddedCount()
    logging.getLogger("bot").addHandler(counter)
    logging.getLogger("bot").setLevel(logging.INFO)
    config = MemoryConfig()
    service, first_ms, ready_s = await start(root, config, items_in_database)
    scope = await service.scope(config, "telegram:1")
    assert isinstance(scope.store, MemoryItemStore)  # the files' store (or its copy's), whose reads are counted
    reread = scope.store.files_read
    # The query model is loaded by the first message's vector; the bot keeps it from then on.
    loaded_rss = rss_kib()
    cpu: list[float] = []
    hybrid = await timed_queries(service, config, rng, cpu)
    lexical = await timed_queries(service, config.model_copy(update={"embeddings_model": None}), rng)
    vector_ms: list[float] = []
    retrieval_cpu: list[float] = []
    retrieval_only = await timed_retrieval(service, config, scope, rng, vector_ms, retrieval_cpu)
    after_rss = rss_kib()
    vectors_done, vectors_total = scope.vectors.coverage
    await service.close()
    return {
        "items": count,
        "first_ms": first_ms,
        "ready_s": ready_s,
        "p50_ms": statistics.median(hybrid),
        "p99_ms": hybrid[int(len(hybrid) * 0.99) - 1],
        "cpu_p50_ms": statistics.median(cpu),
        "retrieval_p50_ms": statistics.median(retrieval_only),
        "retrieval_p99_ms": retrieval_only[int(len(retrieval_only) * 0.99) - 1],
        "retrieval_cpu_p50_ms": statistics.median(retrieval_cpu),
        "lexical_p50_ms": statistics.median(lexical),
        "vector_p50_ms": statistics.median(vector_ms),
        "embedded_at_start": counter.embedded,
        "files_reread": reread,
        "vectors": f"{vectors_done}/{vectors_total}",
        "rss_mib": max(loaded_rss, after_rss) / 1024,
        "baseline_mib": baseline / 1024,
    }


def measure(count: int, root: Path) -> dict[str, float | str]:
    return asyncio.run(measure_async(count, root))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, help=f"how many items (default: {', '.join(map(str, SIZES))})")
    parser.add_argument("--json", action="store_true", help="one JSON line of figures after each size's row")
    steps = parser.add_mutually_exclusive_group()
    for name, what in (("--prepare", "write"), ("--cold", "first start of"), ("--one", "restart and measure")):
        steps.add_argument(name, nargs=2, metavar=("COUNT", "FOLDER"), help=f"one step in this process: {what} FOLDER")
    arguments = parser.parse_args()
    if arguments.prepare:
        prepare(int(arguments.prepare[0]), Path(arguments.prepare[1]))
        return
    if arguments.cold:
        print(json.dumps(asyncio.run(cold_start_async(Path(arguments.cold[1])))))
        return
    if arguments.one:
        print(json.dumps(measure(int(arguments.one[0]), Path(arguments.one[1]))))
        return
    as_json = arguments.json
    sizes = arguments.sizes or list(SIZES)
    print(
        f"{'items':>8} {'cold 1st':>9} {'cold ready':>10} {'1st answer':>10} {'ready':>6} {'p50':>8} {'p99':>8} "
        f"{'cpu p50':>8} {'retr p50':>8} {'retr p99':>8} {'retr cpu':>8} {'lexical':>8} {'vector':>8} {'embedded':>8} "
        f"{'re-read':>7} {'RSS':>8} {'base':>8}"
    )
    for size in sizes:
        row: dict[str, float | str] = {}
        with tempfile.TemporaryDirectory() as directory:
            # Each step in its own process: the files written, the first start, then a restart.
            for step in ("--prepare", "--cold", "--one"):
                output = subprocess.run(
                    [sys.executable, "-m", "bench.memory_retrieval", step, str(size), directory],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                if step != "--prepare":
                    row.update(json.loads(output.strip().splitlines()[-1]))
        print(
            f"{row['items']:>8} {row['cold_first_ms']:>6.0f} ms {row['cold_ready_s']:>8.1f} s "
            f"{row['first_ms']:>7.0f} ms {row['ready_s']:>4.1f} s {row['p50_ms']:>5.1f} ms {row['p99_ms']:>5.1f} ms "
            f"{row['cpu_p50_ms']:>5.1f} ms {row['retrieval_p50_ms']:>5.1f} ms {row['retrieval_p99_ms']:>5.1f} ms "
            f"{row['retrieval_cpu_p50_ms']:>5.1f} ms "
            f"{row['lexical_p50_ms']:>5.1f} ms {row['vector_p50_ms']:>5.1f} ms "
            f"{row['embedded_at_start']:>8} "
            f"{row['files_reread']:>7} {row['rss_mib']:>4.0f} MiB {row['baseline_mib']:>4.0f} MiB"
        )
        if as_json:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

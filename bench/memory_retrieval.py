"""Memory retrieval at scale: 1,000 / 10,000 / 100,000 items.

For each size, in a fresh subprocess (so resident memory is that size's own): synthetic items are
written as the bot writes them (a year of episodic day files, plus semantic and procedural files),
then the figures are:

- index build at start: reading every JSONL file and building the BM25 and lookup indexes
  (what the first message after a start pays; target at most 5 s at 100,000 items);
- per-query latency of the whole per-message read path (change check of the files, scoring,
  top-k per layer, prompt pack under the budgets), p50 and p99 over 300 queries
  (target p50 at most 10 ms at 100,000 items);
- resident memory (RSS) after loading, and its growth over the interpreter's baseline.

Lexical only (no embedding endpoint). Run: `.venv/bin/python -m bench.memory_retrieval [sizes...]`
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.compaction.estimator import TokenEstimator
from bot.domain.memory import MemoryItem, MemoryLayer, MemoryQuery
from bot.memory.embeddings import VectorIndex
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.memory.prompt_pack import MemoryPromptPackService
from bot.memory.retrieval import MemoryRetrievalService
from bot.memory.write_service import fingerprint_of
from bot.settings import MemoryConfig
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths

SIZES = (1_000, 10_000, 100_000)
QUERIES = 300
DAYS = 365
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

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


def measure(count: int) -> dict[str, float]:
    rng = random.Random(count)
    baseline = rss_kib()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name, items in make_items(count, rng).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(dumps_line(item.to_json_dict()) + "\n" for item in items))
        paths = MemoryPaths(root)
        started = time.perf_counter()
        store = MemoryItemStore(paths, UTC)
        lexical, vectors = Bm25Index(), VectorIndex()
        store.subscribe(lexical)
        store.subscribe(vectors)
        store.refresh_sync()
        build_seconds = time.perf_counter() - started
        loaded_rss = rss_kib()

        retrieval = MemoryRetrievalService(store, lexical, vectors)
        pack_service = MemoryPromptPackService(TokenEstimator(), UTC)
        config = MemoryConfig()
        timings = []
        for _ in range(QUERIES):
            text = sentence(rng, 12)
            query = MemoryQuery(
                text=text,
                session_id="telegram:1",
                now=NOW,
                soft_budget_tokens=config.soft_prompt_budget_tokens,
                max_budget_tokens=config.max_prompt_budget_tokens,
            )
            began = time.perf_counter()
            store.refresh_sync()  # the per-message check for hand edits
            result = retrieval.retrieve(query)
            pack_service.build(result.items, result.candidates, query.soft_budget_tokens, query.max_budget_tokens)
            timings.append((time.perf_counter() - began) * 1000)
    timings.sort()
    return {
        "items": count,
        "build_s": build_seconds,
        "p50_ms": statistics.median(timings),
        "p99_ms": timings[int(len(timings) * 0.99) - 1],
        "rss_mib": loaded_rss / 1024,
        "rss_growth_mib": (loaded_rss - baseline) / 1024,
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(int(sys.argv[2]))))
        return
    sizes = [int(arg) for arg in sys.argv[1:]] or list(SIZES)
    print(f"{'items':>8} {'index build':>12} {'p50':>9} {'p99':>9} {'RSS':>9} {'RSS growth':>11}")
    for size in sizes:
        output = subprocess.run(
            [sys.executable, "-m", "bench.memory_retrieval", "--one", str(size)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(output.strip().splitlines()[-1])
        print(
            f"{row['items']:>8} {row['build_s']:>10.2f} s {row['p50_ms']:>6.2f} ms {row['p99_ms']:>6.2f} ms "
            f"{row['rss_mib']:>5.0f} MiB {row['rss_growth_mib']:>7.0f} MiB"
        )


if __name__ == "__main__":
    main()

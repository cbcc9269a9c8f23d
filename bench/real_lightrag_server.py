"""What the real LightRAG server of the tests costs (`tests/rag/real_lightrag_server.py`): how long
`lightrag-server` takes to answer `/health` after its start, to process one exchange (insert, then its track
until processed, the fake model answering the extraction), to answer a query (`/query/data`, naive), and to
stop after SIGINT, and how much memory it holds then (resident set). Medians over the runs, each run a new
server in a new folder.

Run: `.venv/bin/python -m bench.real_lightrag_server [--runs 3] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from bot.rag.backend import RagQuery
from bot.rag.documents import RagDocument
from bot.rag.server import LightRagServerBackend
from bot.settings import RagConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.rag.helpers import lightrag_responder
from tests.rag.real_lightrag_server import RealLightRagServer

API_KEY = "bench-key"
QUERIES = 10


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def indexed_and_queried(server: RealLightRagServer) -> tuple[float, float]:
    """Seconds to process one exchange, and the median seconds of a query."""
    config = RagConfig(server_url=server.url)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    try:
        started = time.monotonic()
        text = "User: Marta met Bruno in Lisbon to plan the Orion launch."
        await backend.insert("global", [RagDocument("conv_bench", "bench:1", "global", text, "")])
        indexed = time.monotonic() - started
        times = []
        for _ in range(QUERIES):
            started = time.monotonic()
            await backend.query("global", RagQuery("where did Marta meet Bruno", "naive", 5, 5, 1200))
            times.append(time.monotonic() - started)
        return indexed, statistics.median(times)
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"start_s": [], "index_s": [], "query_ms": [], "stop_s": [], "resident_mb": []}
    with FakeOpenAI() as model, tempfile.TemporaryDirectory() as folder:
        model.set_responder(lightrag_responder)
        for run in range(args.runs):
            server = RealLightRagServer(model.base_url, API_KEY, Path(folder) / f"run{run}")
            started = time.monotonic()
            server.start()
            figures["start_s"].append(time.monotonic() - started)
            indexed, query = asyncio.run(indexed_and_queried(server))
            figures["index_s"].append(indexed)
            figures["query_ms"].append(query * 1000)
            figures["resident_mb"].append(resident_mb(server.pid))
            started = time.monotonic()
            server.stop()
            figures["stop_s"].append(time.monotonic() - started)
    medians = {name: round(statistics.median(values), 2) for name, values in figures.items()}
    if args.json:
        print(json.dumps(medians))
        return
    print(f"lightrag-server, medians of {args.runs} runs")
    print(f"  start to /health     {medians['start_s']:.2f} s")
    print(f"  one exchange indexed {medians['index_s']:.2f} s")
    print(f"  query (naive)        {medians['query_ms']:.1f} ms")
    print(f"  resident memory      {medians['resident_mb']:.0f} MB")
    print(f"  stop after SIGINT    {medians['stop_s']:.2f} s")


if __name__ == "__main__":
    main()

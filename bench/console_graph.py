"""The console's graph page on a large knowledge graph: the time the backend takes to read what the page draws
(`RagBackend.graph`: the 400 most connected entities, the text of their chunks, and the names counted), on
LightRAG's file storage and on its PostgreSQL tables (a throw-away server, `tests/postgres_server.py`: 127.0.0.1,
fsync off as in the tests), and the size of the JSON the page sends.

The graph is written straight into LightRAG's storages through its own API (no extraction: the figures are the
read's): `--entities` entities, each related to two earlier ones picked in proportion to their relations (so a
few are far more connected than the rest, as in a real graph), each drawn from one to three of `--chunks`
chunks of about 1,000 characters. Each read is timed on a graph already open (the page is opened in a bot that
runs); the first read of the files after they are written is reported apart (it loads the GraphML).

Run: `.venv/bin/python -m bench.console_graph [--entities 20000] [--chunks 5000] [--runs 5] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.console.graph_page import MAX_NODES, graph_json
from bot.llm.client import LlmClient
from bot.rag.embedded import EmbeddedLightRag, StorageKind
from bot.rag.graph_view import SEPARATOR
from bot.settings import RagConfig
from tests.postgres_server import create_database, running_server

WORKSPACE = "chat_bench"
EXCHANGE = (
    "Conversation in chat telegram:1 on 2026-05-01 09:30 (UTC)\nUser: {a} told me about {b} and the trip they "
    "planned together, with the dates and the places to see.\nAssistant: That sounds like a lovely plan; {a} and "
    "{b} will enjoy it."
)


def synthetic_graph(
    entities: int, chunks: int, seed: int = 7
) -> tuple[list[tuple[str, dict[str, str]]], list[tuple[str, str, dict[str, str]]], dict[str, dict[str, Any]]]:
    """Nodes, edges and chunks as LightRAG stores them after extraction."""
    rng = random.Random(seed)
    names = [f"Entity {index:06d}" for index in range(entities)]
    chunk_ids = [f"chunk-{index:06d}" for index in range(chunks)]
    ends: list[int] = [0, 1]  # every relation's two ends: picking from it picks in proportion to the relations
    edges: list[tuple[str, str, dict[str, str]]] = []
    for index in range(2, entities):
        for other in {rng.choice(ends), rng.choice(ends)}:
            source = chunk_ids[rng.randrange(chunks)]
            edges.append(
                (names[index], names[other], {
                    "description": f"{names[index]} and {names[other]} came up together", "keywords": "together",
                    "weight": "1.0", "source_id": source, "file_path": "convbatch_bench",
                })
            )  # fmt: skip
            ends += [index, other]
    nodes = []
    for name in names:
        sources = [chunk_ids[rng.randrange(chunks)] for _ in range(rng.randint(1, 3))]
        nodes.append(
            (name, {
                "entity_id": name, "entity_type": "concept", "source_id": SEPARATOR.join(sources),
                "description": f"{name} was mentioned: a person the user spoke of, with a few words about them.",
                "file_path": "convbatch_bench",
            })
        )  # fmt: skip
    texts = {
        chunk_id: {
            "content": "\n\n".join(
                EXCHANGE.format(a=rng.choice(names), b=rng.choice(names)) for _ in range(4)
            ),
            "tokens": 250, "chunk_order_index": 0, "full_doc_id": "convbatch_bench", "file_path": "convbatch_bench",
        }
        for chunk_id in chunk_ids
    }  # fmt: skip
    return nodes, edges, texts


async def write_graph(backend: EmbeddedLightRag, entities: int, chunks: int) -> None:
    nodes, edges, texts = synthetic_graph(entities, chunks)
    await backend.open(WORKSPACE)
    rag = backend._instances[WORKSPACE]  # the bench writes the storages as an extraction would
    graph = rag.chunk_entity_relation_graph
    await graph.upsert_nodes_batch(nodes)
    await graph.upsert_edges_batch(edges)
    await rag.text_chunks.upsert(texts)
    await graph.index_done_callback()
    await rag.text_chunks.index_done_callback()


async def figures(
    folder: Path, storage: StorageKind, url: str | None, entities: int, chunks: int, runs: int
) -> dict[str, float]:
    llm = LlmClient("sk-bench", "http://127.0.0.1:9/v1")  # never called: nothing is extracted or embedded
    config = RagConfig()

    def backend() -> EmbeddedLightRag:
        return EmbeddedLightRag(folder / storage, llm, lambda: config, lambda: "none", storage, postgres_url=url)

    writer = backend()
    try:
        await write_graph(writer, entities, chunks)
    finally:
        await writer.close()
    reader = backend()
    results: dict[str, float] = {}
    try:
        started = time.perf_counter()
        view = await reader.graph(WORKSPACE, MAX_NODES)
        results["first_read_ms"] = (time.perf_counter() - started) * 1000
        spent = []
        for _ in range(runs):
            started = time.perf_counter()
            view = await reader.graph(WORKSPACE, MAX_NODES)
            spent.append((time.perf_counter() - started) * 1000)
        results["read_median_ms"] = statistics.median(spent)
        results["drawn"] = len(view.entities)
        results["total"] = view.total
        results["json_kb"] = len(json.dumps(graph_json(view))) / 1024
    finally:
        await reader.close()
        await llm.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--entities", type=int, default=20000)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # LightRAG's notes on opening its tables
    report: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        report["files"] = await figures(Path(folder), "files", None, args.entities, args.chunks, args.runs)
        with running_server() as server:
            url = await asyncio.to_thread(create_database, server, "bench")
            report["postgres"] = await figures(Path(folder), "postgres", url, args.entities, args.chunks, args.runs)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"A graph of {args.entities:,} entities and {args.chunks:,} chunks; the page draws {MAX_NODES}:")
    for storage, result in report.items():
        print(
            f"  {storage:9} read {result['read_median_ms']:7.1f} ms (median of {args.runs}), "
            f"first read {result['first_read_ms']:7.1f} ms; {result['drawn']:.0f} of {result['total']:,.0f} "
            f"entities drawn; JSON {result['json_kb']:.0f} KB"
        )


if __name__ == "__main__":
    asyncio.run(main())

"""The console's graph page on a large knowledge graph: the time the backend takes to read what the page draws
(`RagBackend.graph`: the 400 most connected entities, the text of their chunks, and the names counted), to
search every entity's name (`RagBackend.search_entities`: for a text every name contains, a hundred do, one
does, none does) and to read the neighbourhood a name found draws (`graph(..., around=)`: of the most connected
entity, cut at 400, and of one of the least), on LightRAG's file storage and on its PostgreSQL tables (a
throw-away server, `tests/postgres_server.py`: 127.0.0.1, fsync off as in the tests), and the size of the JSON
the page sends.

The graph is written straight into LightRAG's storages through its own API (no extraction: the figures are the
read's): `--entities` entities, each related to two earlier ones picked in proportion to their relations (so a
few are far more connected than the rest, as in a real graph), each drawn from one to three of `--chunks`
chunks of about 1,000 characters. Each read is timed on a graph already open (the page is opened in a bot that
runs); the first read of the files after they are written is reported apart (it loads the GraphML).

The PostgreSQL tables are analyzed after they are written, as autovacuum analyzes them in a database that runs
(`--unanalyzed`: read as written, before any statistics).

Run: `.venv/bin/python -m bench.console_graph [--entities 20000] [--chunks 5000] [--runs 5] [--unanalyzed] [--json]`
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from bot.console.graph_page import MAX_NODES, SEARCH_RESULTS, graph_json
from bot.llm.client import LlmClient
from bot.rag.embedded import EmbeddedLightRag, StorageKind
from bot.rag.graph_view import SEPARATOR
from bot.settings import RagConfig
from tests.postgres_server import create_database, running_server

T = TypeVar("T")
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
    folder: Path, storage: StorageKind, url: str | None, entities: int, chunks: int, runs: int, analyze: bool = True
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
    if url is not None and analyze:
        # A database that runs has its new rows analyzed by autovacuum within a minute or so; until then the planner
        # takes LightRAG's tables for nearly empty, and a neighbourhood's traversal is many times slower.
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("ANALYZE")
        finally:
            await connection.close()
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
        for kind, query in searches(entities).items():
            found, results[f"search {kind}_ms"] = await timed(
                runs, reader.search_entities, WORKSPACE, query, SEARCH_RESULTS
            )
            results[f"search {kind}_found"] = len(found)
        for kind, name in (("hub", "Entity 000000"), ("leaf", f"Entity {entities - 1:06d}")):
            around, results[f"around {kind}_ms"] = await timed(runs, reader.graph, WORKSPACE, MAX_NODES, name)
            results[f"around {kind}_drawn"] = len(around.entities)
    finally:
        await reader.close()
        await llm.close()
    return results


def searches(entities: int) -> dict[str, str]:
    """What the bench searches for, by how many of the names contain it (the names are "Entity 000000" onwards)."""
    middle = f"Entity {entities // 2:06d}"
    return {"every name": "entity", "a hundred": middle[:-2], "one": middle, "none": "zebra"}


async def timed(runs: int, read: Callable[..., Awaitable[T]], *args: Any) -> tuple[T, float]:
    """What `read(*args)` answers, and its median time in milliseconds over `runs` calls."""
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = await read(*args)
        spent.append((time.perf_counter() - started) * 1000)
    return answer, statistics.median(spent)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--entities", type=int, default=20000)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--unanalyzed", action="store_true", help="PostgreSQL's tables read before any ANALYZE")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # LightRAG's notes on opening its tables
    report: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        report["files"] = await figures(Path(folder), "files", None, args.entities, args.chunks, args.runs)
        with running_server() as server:
            url = await asyncio.to_thread(create_database, server, "bench")
            report["postgres"] = await figures(
                Path(folder), "postgres", url, args.entities, args.chunks, args.runs, not args.unanalyzed
            )
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
        for kind in searches(args.entities):
            print(
                f"  {'':9} search matching {kind:10} {result[f'search {kind}_ms']:7.1f} ms "
                f"({result[f'search {kind}_found']:.0f} answered)"
            )
        for kind in ("hub", "leaf"):
            print(
                f"  {'':9} neighbourhood of a {kind:4} {result[f'around {kind}_ms']:7.1f} ms "
                f"({result[f'around {kind}_drawn']:.0f} entities drawn)"
            )


if __name__ == "__main__":
    asyncio.run(main())

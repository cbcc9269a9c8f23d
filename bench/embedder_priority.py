"""How long a message's query vector waits while the knowledge graph embeds its documents.

The offline embedder runs one call at a time. LightRAG embeds an indexing batch's chunks, entities and
relations in several calls at once (`embedding_func_max_async`, 8 by default), each a few passages at a
time; a message's query vector, made on the reply's path, has to get the engine between them. This
measures the query's wait with 8 such callers embedding `--passages` passages each, against the same
query with the engine idle, in one process; medians of `--rounds` queries.

Run: `.venv/bin/python -m bench.embedder_priority [--passages 64] [--rounds 15]`
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bot.llm.local_embeddings import LocalEmbedder

PARALLEL_CALLS = 8  # LightRAG's default embedding_func_max_async
PASSAGE = (
    "Conversation in chat telegram:42 on 2026-11-27 10:15 (UTC)\nUser: my sister Marta moved to Lisbon last "
    "week and loves the tiles, the trams and the bakeries there.\nAssistant: that sounds lovely; noted."
)


async def query_wait(embedder: LocalEmbedder, number: int) -> float:
    started = time.perf_counter()
    await embedder.embed_query(f"where does my sister live now? ({number})")  # a new text: never cached
    return time.perf_counter() - started


async def measure(passages: int, rounds: int) -> tuple[float, float]:
    embedder = LocalEmbedder()
    await embedder.embed_query("warm up")
    idle = [await query_wait(embedder, number) for number in range(rounds)]
    texts = [f"{PASSAGE} ({number})" for number in range(passages)]
    busy: list[float] = []
    for number in range(rounds):
        indexing = [asyncio.ensure_future(embedder.embed(texts)) for _ in range(PARALLEL_CALLS)]
        await asyncio.sleep(0.05)  # the graph's calls are under way when the message comes
        busy.append(await query_wait(embedder, rounds + number))
        await asyncio.gather(*indexing)
    return statistics.median(idle), statistics.median(busy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=64, help="passages each of the 8 graph calls embeds")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    idle, busy = asyncio.run(measure(args.passages, args.rounds))
    print(f"query vector p50, engine idle: {idle * 1000:.1f} ms")
    print(f"query vector p50, graph embedding {PARALLEL_CALLS} x {args.passages} passages: {busy * 1000:.1f} ms")
    print(f"ratio: {busy / idle:.1f}x")


if __name__ == "__main__":
    main()

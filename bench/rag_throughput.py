"""RAG: indexing throughput and retrieval latency of embedded LightRAG (file storages).

An in-process instant model answers LightRAG's extraction prompts (three entities and two relations
per document); vectors come from the bundled offline embedder, as by default (`--hash-vectors`: the
test fake's 64-dimension hashes instead, to see LightRAG's cost alone). For each corpus size:
documents/s when indexing in batches of `rag.batchSize` through `RagService.flush` (the scheduler's
job), then the median and p95 latency of `# Relevant Memory` retrieval per query mode, which is what
the graph adds to a reply (with the graph empty it adds nothing: retrieval returns before any query;
the message's vector is made first, untimed, as memory retrieval makes it before in a reply),
the model calls made while retrieving (0 expected: keywords are made locally), and resident memory.

Run: `.venv/bin/python -m bench.rag_throughput [--sizes 100 1000] [--queries 20] [--hash-vectors]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from bot.context.estimator import TokenEstimator
from bot.llm.client import ChatRequest, ChatResult, LlmClient
from bot.llm.embedders import Embedders
from bot.llm.local_embeddings import LOCAL_MODEL
from bot.rag.embedded import EmbeddedLightRag
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore
from bot.settings import RuntimeConfig
from tests.fakes.openai_server import Reply, fake_embedding
from tests.rag.helpers import lightrag_responder

TOPICS = ["Lisbon", "Falcon", "Marta", "Orion", "Nautilus", "Hermes", "Quartz", "Zephyr", "Gulbenkian", "Texas"]


class InstantModel:
    """Stands in for `LlmClient`: LightRAG's prompts answered at once, vectors from the fake's hash."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        reply = lightrag_responder({"messages": request.messages})
        return ChatResult(reply.text or "" if isinstance(reply, Reply) else "")

    async def embed(self, texts: list[str], model: str, timeout_seconds: float = 30.0) -> list[list[float]]:
        return [fake_embedding(text) for text in texts]


def exchange(number: int) -> tuple[str, str]:
    a, b, c = TOPICS[number % 10], TOPICS[(number * 3 + 1) % 10], TOPICS[(number * 7 + 2) % 10]
    user = f"Note {number}: {a} met {b} about the {c} plan on day {number % 28 + 1}, budget {number * 13} euros."
    return user, f"Noted: {a} and {b} discussed {c} (entry {number})."


async def run_size(size: int, queries: int, root: Path, hash_vectors: bool) -> dict[str, Any]:
    rag: dict[str, Any] = {"minExchangeChars": 10}
    if hash_vectors:
        rag.update(embeddingModel="hash", embeddingDimensions=64, cosineThreshold=-1.0)
    config = RuntimeConfig.model_validate({"rag": rag, "memory": {}})
    model = InstantModel()
    llm = cast(LlmClient, model)  # the instant model stands in for the client
    embedders = Embedders(llm)
    backend = EmbeddedLightRag(root / "rag", llm, lambda: config.rag, lambda: "instant", embedders=embedders)
    local = embedders.get(LOCAL_MODEL)
    service = RagService(RagDocumentStore(root / "rag" / "documents.jsonl"), backend, lambda: config, TokenEstimator())
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for number in range(size):
        user, assistant = exchange(number)
        await service.enqueue(config, "bench:1", start + timedelta(minutes=number), user, assistant, [])
    started = time.perf_counter()
    indexed = await service.flush_all()
    index_seconds = time.perf_counter() - started
    figures: dict[str, Any] = {
        "documents": indexed,
        "index_docs_per_s": round(indexed / index_seconds, 1),
        "index_ms_per_doc": round(1000 * index_seconds / indexed, 1),
        "model_calls": model.calls,
    }
    calls_before = model.calls
    for mode in ("naive", "local", "global", "hybrid", "mix"):
        mode_config = config.model_copy(update={"rag": config.rag.model_copy(update={"query_mode": mode})})
        latencies = []
        for number in range(queries):
            a, b = TOPICS[number % 10], TOPICS[(number + 3) % 10]
            sent = time.perf_counter()
            # Each question different (across modes too): a repeated one is answered from the vector cache.
            question = f"What did {a} and {b} decide on day {number + 1} for the {mode} plan?"
            if local is not None and not hash_vectors:
                # In a reply, memory retrieval (20) has made the message's vector just before.
                await local.embed_query(question)
                sent = time.perf_counter()
            result = await service.retrieve(mode_config, "bench:1", question, lambda: "")
            latencies.append((time.perf_counter() - sent) * 1000)
            assert result.outcome == "ok", result
        figures[f"{mode}_ms_p50"] = round(statistics.median(latencies), 1)
        figures[f"{mode}_ms_p95"] = round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 1)
    figures["model_calls_retrieving"] = model.calls - calls_before
    figures["rss_mib"] = round(rss_mib(), 1)
    await service.close()
    return figures


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(sizes: list[int], queries: int, hash_vectors: bool) -> None:
    for size in sizes:
        with tempfile.TemporaryDirectory() as folder:
            figures = await run_size(size, queries, Path(folder), hash_vectors)
        print(json.dumps({"size": size, **figures}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--hash-vectors", action="store_true", help="the test fake's vectors, not the embedder")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(arguments.sizes, arguments.queries, arguments.hash_vectors))

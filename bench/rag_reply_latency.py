"""What the knowledge graph adds to a reply: latency with the graph empty and with N indexed exchanges.

Two bots, built as `python -m bot` builds them (shipped settings: hybrid mode, the bundled offline
embedder), each in its own workspace, answer the same questions through the real router, pipeline
and `openai` client, against the fake OpenAI-compatible server answering at once on 127.0.0.1. One
workspace's graph is empty; the other's holds `--documents` exchanges, indexed beforehand by the
bot's own `RagService` and LightRAG with an in-process instant model (the graph is built once and
kept in the system's temporary folder: indexing 1,000 exchanges takes minutes; `--rebuild` makes it
again). The questions alternate between the two bots, so both see the same load on a shared machine.
Every question names people and things of the graph and is different, so the query vector cache
cannot flatter the figures.

Printed (one JSON line): reply p50 / p99 for each bot and the difference of the medians; the CPU
time the process spent per reply (p50; every thread: the fake servers' share is the same for both
bots), which a busy shared machine does not inflate as it inflates wall time; the model requests
each bot made while answering (one chat request a reply, no embeddings request); how many replies
carried `# Relevant Memory`; and resident memory before and after the graph was first read (both
bots have answered a greeting, which loads the embedder and not the graph).

Run: `.venv/bin/python -m bench.rag_reply_latency [--documents 1000] [--messages 100] [--rebuild]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from bench.pipeline_overhead import percentile
from bench.rag_throughput import InstantModel, rss_mib
from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.rag.embedded import EmbeddedLightRag
from bot.rag.service import RELEVANT_MEMORY_HEADER, RagService
from bot.rag.store import RagDocumentStore
from bot.settings import RuntimeConfig
from bot.workspace import Workspace
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

# Bump when `exchange` or the indexing changes, so an old cached graph is not measured.
GRAPH_VERSION = 3
WARM_UP = 5
# Documents indexed at a time while the graph is built (bigger than the bot's batches: faster).
INDEX_BATCH = 100
# A chat's cast: people, places, projects and organisations, some 180 names in all, each exchange
# naming four of them, so the graph grows as a real one does (many entities, each in a few dozen
# exchanges), not ten entities cited a hundred times each.
PEOPLE = """Marta Ivan Sofia Pedro Lucia Omar Yuki Priya Jonas Elena Tomas Amara Hugo Nadia Felix Irene Rafael
Greta Kofi Leila Anton Beatriz Samir Clara Dmitri Ingrid Mateo Noor Oskar Paula Ravi Selma Teodor Uma Viktor
Wanda Xavier Yasmin Zoltan Agnes Bruno Carmen Dario Emil Fatima Gustav Hana Igor Julia Karim""".split()
PLACES = """Lisbon Porto Madrid Seville Lyon Munich Vienna Prague Krakow Riga Tallinn Helsinki Oslo Bergen Dublin
Cork Leeds Bristol Ghent Utrecht Turin Naples Split Zagreb Sofia Varna Izmir Tbilisi Yerevan Almaty""".split()
PROJECTS = """Falcon Orion Nautilus Hermes Quartz Zephyr Atlas Borealis Cobalt Delta Ember Fjord Granite Halcyon
Iris Juniper Kestrel Lumen Meridian Nimbus Obsidian Pioneer Quasar Raven Sierra Tundra Umbra Vortex""".split()
ORGANISATIONS = """Gulbenkian Siemens Nokia Ikea Spotify Philips Zeiss Bosch Lego Carlsberg Heineken Unilever
Ericsson Volvo Airbus Renault Michelin Danone Pirelli Ferrero Barilla Lavazza Nestle Roche Novartis
Sandoz Logitech Swatch Rolex Lindt""".split()
CAST = [*PEOPLE, *PLACES, *PROJECTS, *ORGANISATIONS]


def graph_cache(documents: int) -> Path:
    return Path(tempfile.gettempdir()) / "memory-bot-bench" / f"rag-graph-{documents}-v{GRAPH_VERSION}"


async def build_graph(rag_dir: Path, documents: int) -> float:
    """Index `documents` exchanges into `rag_dir` as the bot does (the durable queue, then batches);
    returns seconds. A build that was stopped goes on from its queue, as the bot does after a restart."""
    config = RuntimeConfig.model_validate({"rag": {"minExchangeChars": 10, "batchSize": INDEX_BATCH}})
    model = InstantModel()
    llm = cast(LlmClient, model)  # the instant model stands in for the client
    backend = EmbeddedLightRag(rag_dir, llm, lambda: config.rag, lambda: "instant", embedders=Embedders(llm))
    store = RagDocumentStore(rag_dir / "documents.jsonl")
    service = RagService(store, backend, lambda: config, TokenEstimator())
    if not (rag_dir / "documents.jsonl").exists():
        start = datetime(2026, 1, 1, tzinfo=UTC)
        for number in range(documents):
            user, assistant = exchange(number)
            await service.enqueue(config, "bench:1", start + timedelta(minutes=number), user, assistant, [])
    started = time.perf_counter()
    await service.flush_all()
    await service.close()
    indexed = (await store.counts())["indexed"]
    if indexed != documents:
        raise RuntimeError(f"only {indexed} of {documents} exchanges were indexed")
    return time.perf_counter() - started


async def seeded_graph(workspace: Path, documents: int, rebuild: bool) -> float | None:
    """Put a graph of `documents` exchanges into `workspace/rag`; seconds spent indexing (None: cached)."""
    cache = graph_cache(documents)
    seconds = None
    if rebuild or not (cache / "documents.jsonl").exists():
        shutil.rmtree(cache, ignore_errors=True)
        building = cache.with_name(cache.name + ".building")
        if rebuild:
            shutil.rmtree(building, ignore_errors=True)
        seconds = await build_graph(building, documents)
        building.rename(cache)
    shutil.copytree(cache, Workspace(workspace).rag_dir)
    return seconds


def exchange(number: int) -> tuple[str, str]:
    """The `number`th exchange: someone, somewhere, a project and an organisation, and some figures."""
    person, friend = PEOPLE[number % len(PEOPLE)], PEOPLE[(number * 7 + 3) % len(PEOPLE)]
    place, project = PLACES[(number * 3) % len(PLACES)], PROJECTS[(number * 5 + 1) % len(PROJECTS)]
    organisation = ORGANISATIONS[(number * 11 + 2) % len(ORGANISATIONS)]
    user = (
        f"Yesterday {person} told me {friend} is moving to {place} for the {project} project with "
        f"{organisation}; the budget is {number * 13 % 9000 + 500} euros and it starts in week {number % 52 + 1}."
    )
    return user, f"Noted: {friend} moves to {place} for {project} at {organisation}, as {person} said."


def question(number: int) -> str:
    """A question about the cast, different every time (no vector cached from an earlier one)."""
    person, place = PEOPLE[(number * 13) % len(PEOPLE)], PLACES[(number * 7) % len(PLACES)]
    project = PROJECTS[(number * 3 + 2) % len(PROJECTS)]
    return f"What did {person} say about {place} and the {project} budget (question {number})?"


class Bot:
    """One bot and what it was seen doing."""

    def __init__(self, name: str, services: Application, fake: FakeOpenAI) -> None:
        self.name = name
        self.services = services
        self.fake = fake
        self.channel = RecordingChannel()
        self.latencies: list[float] = []
        self.cpu: list[float] = []
        self.answered = 0
        self.with_relevant_memory = 0
        self.requests: dict[str, int] = {}

    async def ask(self, text: str, measured: bool) -> None:
        before = len(self.fake.requests)
        sent, cpu = time.perf_counter(), time.process_time()
        await self.services.router.accept(self.channel.message("solo", text), self.channel)
        self.answered += 1
        await self.channel.wait_for("solo", self.answered, timeout=120)
        elapsed, cpu_used = (time.perf_counter() - sent) * 1000, (time.process_time() - cpu) * 1000
        # What memory does after a reply (embedding the new items) must not land in the next reply's figures.
        await self.services.memory.settle()
        if not measured:
            return
        self.latencies.append(elapsed)
        self.cpu.append(cpu_used)
        for request in self.fake.requests[before:]:
            self.requests[request.path] = self.requests.get(request.path, 0) + 1
        [body] = self.fake.chat_requests()[-1:]
        if RELEVANT_MEMORY_HEADER in json.dumps(body.get("messages", [])):
            self.with_relevant_memory += 1

    def figures(self) -> dict[str, Any]:
        return {
            "p50_ms": round(statistics.median(self.latencies), 1),
            "p99_ms": round(percentile(self.latencies, 0.99), 1),
            "cpu_p50_ms": round(statistics.median(self.cpu), 1),
            "requests": self.requests,
            "with_relevant_memory": self.with_relevant_memory,
        }


async def measure(root: Path, documents: int, messages: int, rebuild: bool) -> dict[str, Any]:
    index_seconds = await seeded_graph(root / "graph", documents, rebuild)
    (root / "empty").mkdir()
    with FakeOpenAI() as fake_empty, FakeOpenAI() as fake_graph:
        empty = Bot("empty", Application(env_for(root / "empty", fake_empty)), fake_empty)
        graph = Bot("graph", Application(env_for(root / "graph", fake_graph)), fake_graph)
        try:
            # A greeting loads the embedder but not the graph (nothing to look up); then a question
            # opens the graph: the difference is what holding the graph costs.
            for bot in (empty, graph):
                await bot.ask("hi there", measured=False)
            rss_before = rss_mib()
            await graph.ask(question(-1), measured=False)
            rss_after = rss_mib()
            for number in range(WARM_UP + messages):
                text = question(number)
                # Alternating which goes first, so neither bot always follows the other's work.
                order = (empty, graph) if number % 2 == 0 else (graph, empty)
                for bot in order:
                    await bot.ask(text, measured=number >= WARM_UP)
        finally:
            for bot in (empty, graph):
                await bot.services.stop()
    empty_figures, graph_figures = empty.figures(), graph.figures()
    return {
        "documents": documents,
        "messages": messages,
        "index_seconds": None if index_seconds is None else round(index_seconds, 1),
        "empty": empty_figures,
        "graph": graph_figures,
        "added_p50_ms": round(graph_figures["p50_ms"] - empty_figures["p50_ms"], 1),
        "added_cpu_p50_ms": round(graph_figures["cpu_p50_ms"] - empty_figures["cpu_p50_ms"], 1),
        "rss_mib_before_graph": round(rss_before, 1),
        "rss_mib_graph_loaded": round(rss_after, 1),
        "rss_mib_end": round(rss_mib(), 1),
    }


async def main(documents: int, messages: int, rebuild: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        figures = await measure(Path(scratch), documents, messages, rebuild)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000, help="exchanges indexed in the graph")
    parser.add_argument("--messages", type=int, default=100, help="questions measured per bot")
    parser.add_argument("--rebuild", action="store_true", help="index the graph again, not from the cache")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(arguments.documents, arguments.messages, arguments.rebuild))

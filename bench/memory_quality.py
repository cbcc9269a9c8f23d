"""Memory retrieval quality: Recall@5 and Recall@10 of the evidence, hybrid against lexical-only.

A conversation of our own making: 40 turns that state something about the user's life, work and
plans, hidden among 600 turns of everyday chatter on the same topics, over 90 days. Each of 40
questions asked later needs one of those turns; half ask in the same words, half paraphrase
("my dog" for "the puppy we adopted"). The turns are written through the bot's own write path
(episodic items plus whatever the rules extract), and a question counts as answered at k when one of
the top k items that `memory_search` returns came from its evidence turn.

The hybrid row uses the bundled offline embedder (multilingual-e5-small, the default); `--endpoint
MODEL` adds the endpoint's embeddings (OPENAI_BASE_URL / OPENAI_API_KEY), `--hashed` the test fake's
hashed bag-of-words vectors (a check of the plumbing only). The LoCoMo benchmark (`bench.locomo`) is
the measure of recall in the prompt; this one isolates `memory_search`.

Run: `.venv/bin/python -m bench.memory_quality [--hashed] [--endpoint MODEL] [--json]` (`--json` adds one JSON
line of figures per row).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.domain.memory import TurnMemoryEvent
from bot.llm.embedders import Embedder
from bot.llm.local_embeddings import LocalEmbedder
from bot.memory.embeddings import as_float16
from bot.memory.extraction import RuleBasedExtractor
from bot.memory.indexing import EmbedderState
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.memory.retrieval import MemoryRetrievalService
from bot.memory.vector_index import VectorIndex
from bot.memory.write_service import MemoryWriteService
from bot.settings import MemoryConfig
from bot.workspace import MemoryPaths


@dataclass(frozen=True)
class Case:
    said: str  # the user's turn that holds the evidence
    answer: str  # the assistant's reply to it
    question: str  # asked later
    paraphrased: bool


CASES = [
    Case(
        "We finally adopted a puppy last week, we named her Biscuit.",
        "Congratulations on Biscuit!",
        "What is my dog called?",
        True,
    ),
    Case(
        "My sister Laura is getting married in Porto in June.",
        "How lovely, a June wedding in Porto!",
        "Where is my sister's wedding?",
        False,
    ),
    Case(
        "I switched our deployment to Kubernetes with Helm charts yesterday.",
        "Nice, Helm makes releases easier.",
        "How do we ship the app to production now?",
        True,
    ),
    Case(
        "The dentist appointment is on the 14th at 9am.",
        "Noted, dentist on the 14th at 9.",
        "When is my dentist appointment?",
        False,
    ),
    Case(
        "I'm allergic to penicillin, please keep that in mind.",
        "I will keep that in mind.",
        "Which antibiotics should I avoid?",
        True,
    ),
    Case(
        "Our wifi router is a Fritzbox 7590 in the hallway.", "Good to know.", "What model is the wifi router?", False
    ),
    Case(
        "I started learning the cello in September.",
        "That's a beautiful instrument.",
        "Which instrument am I practising?",
        True,
    ),
    Case(
        "My favourite dish is my grandmother's mushroom risotto.",
        "Sounds delicious.",
        "What food do I love most?",
        True,
    ),
    Case(
        "The car needs its MOT inspection before the end of March.",
        "I'll remind you in March.",
        "When is the car inspection due?",
        False,
    ),
    Case(
        "I work as a data engineer at a logistics startup called Shipwise.",
        "Interesting job!",
        "What is my occupation?",
        True,
    ),
    Case(
        "Our apartment lease ends on August 31st.",
        "Noted the lease end date.",
        "When does the apartment lease end?",
        False,
    ),
    Case("Tom prefers his coffee black, no sugar.", "Black coffee for Tom.", "How does Tom take his coffee?", False),
    Case(
        "I ran my first half marathon in 1 hour 52 minutes.",
        "Great time for a first half!",
        "What was my race result?",
        True,
    ),
    Case(
        "The postgres backups run every night at 2am via cron.",
        "Good practice.",
        "When are the database backups scheduled?",
        True,
    ),
    Case("My passport expires in November next year.", "Worth renewing early.", "When does my passport expire?", False),
    Case(
        "We are flying to Tokyo on the 3rd of April with ANA.",
        "Exciting trip!",
        "Which airline are we taking to Japan?",
        True,
    ),
    Case(
        "I keep the spare house key in the blue flower pot.",
        "Noted, blue flower pot.",
        "Where is the spare house key?",
        False,
    ),
    Case(
        "My manager is called Priya and she prefers written updates.",
        "Written updates for Priya.",
        "Who is my boss?",
        True,
    ),
    Case(
        "The garden tomatoes need watering every second day.",
        "Every other day for the tomatoes.",
        "How often should the tomatoes be watered?",
        False,
    ),
    Case("I'm vegetarian since 2019.", "Noted, vegetarian.", "Do I eat meat?", True),
    Case("Our son Leo starts school on September 5th.", "A big day for Leo!", "When does Leo start school?", False),
    Case(
        "The staging server is at staging.shipwise.internal on port 8443.",
        "Got it.",
        "What is the address of the staging server?",
        False,
    ),
    Case(
        "I hurt my left knee while skiing in February.",
        "Hope it heals quickly.",
        "What injury did I get on the slopes?",
        True,
    ),
    Case("My bank is Triodos and the account ends in 4471.", "Noted.", "Which bank do I use?", False),
    Case(
        "We decided to repaint the living room in sage green.",
        "Sage green is calming.",
        "What colour will the lounge be?",
        True,
    ),
    Case(
        "I'm reading Middlemarch by George Eliot at the moment.",
        "A classic.",
        "Which novel am I in the middle of?",
        True,
    ),
    Case(
        "The band practice moved to Thursday evenings.", "Thursday evenings then.", "When is band practice now?", False
    ),
    Case(
        "Grandpa's birthday is on the 22nd of May, he turns 80.",
        "A big birthday!",
        "How old is grandpa turning?",
        False,
    ),
    Case("I pay 1450 euros rent per month.", "Noted your rent.", "How much is my monthly housing cost?", True),
    Case("The cat's vet is Dr. Okafor at the Elm Street clinic.", "Noted.", "Who treats our cat?", True),
    Case("My laptop is a ThinkPad X1 Carbon from 2021.", "Solid machine.", "What computer do I use?", True),
    Case("I can't stand cilantro, it tastes like soap to me.", "No cilantro then.", "Which herb do I dislike?", True),
    Case(
        "The Grafana dashboard for orders is called Order Flow.",
        "Noted.",
        "What is the Grafana dashboard for orders called?",
        False,
    ),
    Case("Our anniversary is on the 9th of October.", "Noted your anniversary.", "When is our anniversary?", False),
    Case("I take vitamin D every morning with breakfast.", "Good habit.", "Which supplement do I take daily?", True),
    Case(
        "The invoice number for the March consulting job is INV-2031.",
        "Noted INV-2031.",
        "What is the invoice number for the March consulting job?",
        False,
    ),
    Case(
        "We booked the Hotel Aurora in Lisbon for the conference.",
        "Nice choice.",
        "Where are we staying for the conference?",
        True,
    ),
    Case(
        "My guitar teacher Miguel charges 40 euros per lesson.", "Noted.", "How much does a guitar lesson cost?", False
    ),
    Case(
        "I'm training for the Berlin marathon in September.",
        "Good luck with training!",
        "Which race am I preparing for?",
        True,
    ),
    Case(
        "The tax return deadline for me is July 31st this year.",
        "Noted the deadline.",
        "When is my tax return due?",
        False,
    ),
]

CHATTER_TOPICS = (
    "weather",
    "coffee",
    "the weekend",
    "a movie",
    "dinner plans",
    "work emails",
    "the garden",
    "running",
    "a podcast",
    "the news",
    "groceries",
    "a bug in the code",
    "docker logs",
    "the train",
    "a birthday gift",
    "music",
    "the car",
    "holiday ideas",
    "the budget",
    "a recipe",
    "the dog walk",
    "the meeting",
    "a book",
)
CHATTER_TEMPLATES = (
    "What do you think about {t} today?",
    "Can you give me a quick tip about {t}?",
    "I was thinking about {t} again, any ideas?",
    "Remind me later to look into {t}.",
    "Tell me something fun about {t}.",
    "Summarise what matters about {t} in two lines.",
)


class HashedWordsEmbedder:
    """The test fake's vectors (hashed words): deterministic, and no better than lexical matching."""

    name = "hashed-words"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        from tests.fakes.openai_server import fake_embedding

        return [fake_embedding(text, 256) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]


async def build(root: Path, embedder: Embedder | None) -> tuple[MemoryRetrievalService, VectorIndex, dict[str, str]]:
    """Write the conversation through the write path; returns retrieval and each case's turn id."""
    rng = random.Random(7)
    store = MemoryItemStore(MemoryPaths(root), UTC)
    lexical, vectors = Bm25Index(), VectorIndex()
    store.subscribe(lexical)
    store.subscribe(vectors)
    writer, rules, config = MemoryWriteService(store), RuleBasedExtractor(), MemoryConfig()
    turns: list[tuple[str, str, str | None]] = [(c.said, c.answer, c.said) for c in CASES]
    for _ in range(600):
        topic = rng.choice(CHATTER_TOPICS)
        turns.append((rng.choice(CHATTER_TEMPLATES).format(t=topic), f"Here is a thought on {topic}.", None))
    rng.shuffle(turns)
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    evidence: dict[str, str] = {}
    for number, (user, answer, case) in enumerate(turns):
        at = start + timedelta(hours=3.5 * number)
        event = TurnMemoryEvent("telegram:1", user, answer, at, f"u{number}", f"a{number}")
        writer.record_turn(event, rules.extract(event, code_aware=True), config)
        if case is not None:
            evidence[case] = f"u{number}"
    await store.flush()
    if embedder is not None:
        vectors.use_embedder(embedder.name)
        todo = vectors.pending()
        made = await embedder.embed([text for _, text in todo])
        vectors.put(dict(zip((key for key, _ in todo), as_float16(made), strict=True)))
    return MemoryRetrievalService(store, lexical, vectors, UTC), vectors, evidence


async def recall(embedder: Embedder | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        retrieval, _, evidence = await build(Path(folder), embedder)
        built = time.perf_counter() - started
        hits = {5: [0, 0], 10: [0, 0]}  # k -> [same words, paraphrased]
        queries = EmbedderState()
        for case in CASES:
            vector = await queries.embed_query(embedder, case.question) if embedder else None
            found = retrieval.search(case.question, 10, vector)
            ranks = [rank for rank, (item, _) in enumerate(found) if evidence[case.said] in item.references]
            for k in hits:
                if ranks and ranks[0] < k:
                    hits[k][int(case.paraphrased)] += 1
    same = sum(1 for case in CASES if not case.paraphrased)
    para = len(CASES) - same
    return {
        "r5": (hits[5][0] + hits[5][1]) / len(CASES),
        "r10": (hits[10][0] + hits[10][1]) / len(CASES),
        "r5_same": hits[5][0] / same,
        "r5_para": hits[5][1] / para,
        "r10_same": hits[10][0] / same,
        "r10_para": hits[10][1] / para,
        "seconds": built,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hashed", action="store_true", help="also hybrid with hashed words (plumbing only)")
    parser.add_argument("--endpoint", metavar="MODEL", help="hybrid with the endpoint's embedding model")
    parser.add_argument("--json", action="store_true", help="also print one JSON line of figures per row")
    args = parser.parse_args()
    rows: list[tuple[str, Embedder | None]] = [
        ("lexical only (BM25)", None),
        ("hybrid, local multilingual-e5-small", LocalEmbedder()),
    ]
    if args.endpoint:
        from bot.llm.client import LlmClient
        from bot.llm.embedders import EndpointEmbedder

        llm = LlmClient(os.environ.get("OPENAI_API_KEY"), os.environ.get("OPENAI_BASE_URL"))
        rows.append((f"hybrid, endpoint {args.endpoint}", EndpointEmbedder(llm, args.endpoint)))
    if args.hashed:
        rows.append(("hybrid, hashed words (plumbing only)", HashedWordsEmbedder()))
    print(f"{len(CASES)} questions ({sum(c.paraphrased for c in CASES)} paraphrased), 640 turns")
    print(f"{'':38} {'R@5':>6} {'R@10':>6}   {'R@5 same/para':>14} {'R@10 same/para':>15} {'build':>8}")
    for label, embedder in rows:
        r = asyncio.run(recall(embedder))
        print(
            f"{label:38} {r['r5']:>6.2f} {r['r10']:>6.2f}   {r['r5_same']:>6.2f} / {r['r5_para']:<5.2f} "
            f"{r['r10_same']:>7.2f} / {r['r10_para']:<5.2f} {r['seconds']:>6.1f} s"
        )
        if args.json:
            print(json.dumps({"label": label, **r}))


if __name__ == "__main__":
    main()

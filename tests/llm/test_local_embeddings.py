"""The offline embedder's work in its worker threads: a long list of passages is done a few at a time, so a
stop waits for one short call, never for a whole document's chunks, and a message's query has the engine
before any passages waiting for it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from bot.llm.local_embeddings import PASSAGES_PER_CALL, LocalEmbedder

PASSAGE = " ".join(f"word{n} of a passage about place{n % 13} and person{n % 7}." for n in range(8))


async def test_a_cancelled_embedding_of_many_passages_leaves_only_the_call_in_progress() -> None:
    embedder = LocalEmbedder()
    started = time.monotonic()
    await embedder.embed([PASSAGE] * PASSAGES_PER_CALL)
    one_call = time.monotonic() - started  # the engine's load is in it too: a generous measure of one call

    passages = [f"{PASSAGE} {n}" for n in range(30 * PASSAGES_PER_CALL)]
    embedding = asyncio.create_task(embedder.embed(passages))
    await asyncio.sleep(one_call / 4)  # the first call of the worker thread is running
    embedding.cancel()
    waited = time.monotonic()
    # What the process waits for before it can exit, as a passage asked now does: the call in progress.
    await embedder.embed([PASSAGE])
    assert time.monotonic() - waited < 3 * one_call  # one call of PASSAGES_PER_CALL and its own, not thirty


class EngineTurns(LocalEmbedder):
    """The embedder, noting who had the engine, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[str] = []

    @contextlib.contextmanager
    def _engine_turn(self, is_query: bool) -> Iterator[None]:
        with super()._engine_turn(is_query):
            self.turns.append("query" if is_query else "passages")
            yield


async def test_a_query_waits_for_one_call_of_passages_however_many_are_asked_at_once() -> None:
    # The knowledge graph embeds an indexing batch in eight calls at once; a message's query comes meanwhile.
    embedder = EngineTurns()
    indexing = [asyncio.ensure_future(embedder.embed([f"{PASSAGE} {n}"] * 6)) for n in range(8)]
    while not embedder.turns:
        await asyncio.sleep(0.01)
    asked = len(embedder.turns)
    await embedder.embed_query("where does my sister live now?")
    assert embedder.turns.index("query") - asked <= 1  # the passages' call running when it was asked, at most
    await asyncio.gather(*indexing)
    assert embedder.turns.count("passages") == 8 * 6 // PASSAGES_PER_CALL


async def test_the_passages_come_back_in_order_whatever_the_number_of_calls() -> None:
    embedder = LocalEmbedder()
    texts = [f"passage number {n} about {topic}" for n, topic in enumerate(["tea", "sea", "trains"] * 3)]
    together = await embedder.embed(texts)
    one_by_one = [(await embedder.embed([text]))[0] for text in texts]
    assert len(together) == len(texts)
    assert all(
        abs(a - b) < 1e-4
        for left, right in zip(together, one_by_one, strict=True)
        for a, b in zip(left, right, strict=True)
    )

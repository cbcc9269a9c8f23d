"""`OfflineTokenizers`: exact token counts for a model when its tokenizer is on this machine already.

tiktoken (installed with LightRAG) knows OpenAI models' encodings, but downloads an encoding's file on
first use. The bot never downloads anything for counting: an encoding is used only when its file is
already in tiktoken's cache (`TIKTOKEN_CACHE_DIR`, `DATA_GYM_CACHE_DIR`, or `<tmp>/data-gym-cache`,
as tiktoken itself looks) and its checksum is right, so loading it cannot touch the network. An
operator who wants exact counts copies the file there once; every other model is estimated from
characters (`TokenEstimator`).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Counter = Callable[[str], int]

_BLOB_ROOT = "https://openaipublic.blob.core.windows.net/encodings/"
# The encodings tiktoken maps OpenAI models to, with the checksums tiktoken itself verifies.
ENCODING_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
}


def tiktoken_cache_dir() -> Path | None:
    """Where tiktoken keeps downloaded encodings (None when its cache is switched off)."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if configured is None:
        return Path(tempfile.gettempdir()) / "data-gym-cache"
    return Path(configured) if configured else None


def cached_encoding_file(encoding: str) -> Path | None:
    """The cached, checksum-verified file of `encoding`, or None when loading it would download."""
    cache = tiktoken_cache_dir()
    expected = ENCODING_SHA256.get(encoding)
    if cache is None or expected is None:
        return None
    path = cache / hashlib.sha1(f"{_BLOB_ROOT}{encoding}.tiktoken".encode()).hexdigest()
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return path if hashlib.sha256(data).hexdigest() == expected else None


class OfflineTokenizers:
    """Finds, loads once and caches an exact counter per model; None where there is none offline."""

    def __init__(self) -> None:
        self._counters: dict[str, Counter | None] = {}

    def counter_for(self, model: str) -> Counter | None:
        if model not in self._counters:
            self._counters[model] = self._load(model)
        return self._counters[model]

    def _load(self, model: str) -> Counter | None:
        try:
            tiktoken: Any = importlib.import_module("tiktoken")
        except ImportError:
            return None
        try:
            encoding_name = tiktoken.encoding_name_for_model(model.rsplit("/", 1)[-1])
        except KeyError:
            return None
        if cached_encoding_file(encoding_name) is None:
            return None
        try:
            encoding = tiktoken.get_encoding(encoding_name)
        except Exception as error:  # a broken install must not break the budget: characters still work
            log.warning("[Context] Could not load the %s tokenizer for %s: %s", encoding_name, model, error)
            return None
        log.info("[Context] Exact token counts for %s (%s, offline)", model, encoding_name)

        def count(text: str) -> int:
            return len(encoding.encode(text, disallowed_special=()))

        return count

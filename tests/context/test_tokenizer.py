"""Exact counts only where a tokenizer is on the machine already: nothing is ever downloaded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bot.context.estimator import TokenEstimator
from bot.context.tokenizer import Counter, OfflineTokenizers, cached_encoding_file, tiktoken_cache_dir
from bot.domain.message import Message


def test_without_a_cached_encoding_there_is_no_exact_counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert tiktoken_cache_dir() == tmp_path
    tokenizers = OfflineTokenizers()
    assert tokenizers.counter_for("gpt-4o") is None  # known to tiktoken, but its file is not here
    assert tokenizers.counter_for("tiny-4k") is None  # unknown to tiktoken
    assert TokenEstimator(tokenizers=tokenizers).text("x" * 35, "gpt-4o") == 10


def test_a_cached_file_with_the_wrong_checksum_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"not the encoding")
    assert cached_encoding_file("o200k_base") is None
    assert OfflineTokenizers().counter_for("gpt-4o") is None


def test_a_switched_off_cache_means_no_exact_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert tiktoken_cache_dir() is None and cached_encoding_file("o200k_base") is None


class WordTokenizers(OfflineTokenizers):
    """A stand-in exact tokenizer for the model `exact`: one token per word."""

    def counter_for(self, model: str) -> Counter | None:
        return (lambda text: len(text.split())) if model == "exact" else None


def test_the_estimator_uses_an_exact_counter_when_there_is_one() -> None:
    estimator = TokenEstimator(tokenizers=WordTokenizers())
    assert estimator.text("one two three", "exact") == 3
    assert estimator.message(Message.user("one two three"), "exact") == 4 + 3
    assert estimator.payload([{"role": "user", "content": "a b"}], None, "exact") == 4 + 2
    assert estimator.text("x" * 35, "other") == 10
    estimator.calibrate("exact", 10_000, 1000)  # exact models need no calibration
    assert estimator.samples_for("exact") == 0

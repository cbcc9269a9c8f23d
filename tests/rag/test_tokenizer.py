"""The offline tokenizer: exact round trips, BPE-like counts, nothing downloaded."""

from __future__ import annotations

import copy

import pytest

from bot.rag.tokenizer import OfflineTokenizer


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world! I have 12345 apples_and__more.",
        "Привет, как дела? 日本語テキスト",
        "tabs\tand\n\nnewlines  \x00 and emoji 🙂🙂",
        "",
    ],
)
def test_decode_gives_back_exactly_the_text(text: str) -> None:
    tokenizer = OfflineTokenizer()
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_a_slice_of_tokens_decodes_to_a_slice_of_the_text() -> None:
    tokenizer = OfflineTokenizer()
    text = "LightRAG cuts documents into chunks by token counts. " * 20
    tokens = tokenizer.encode(text)
    assert text.startswith(tokenizer.decode(tokens[:50]))


def test_english_prose_counts_about_four_characters_a_token() -> None:
    text = "The quick brown fox jumps over the lazy dog while the user asks about their calendar. " * 50
    ratio = len(text) / OfflineTokenizer().count(text)
    assert 3.0 <= ratio <= 5.5


def test_it_survives_deepcopy_as_lightrag_requires() -> None:
    tokenizer = copy.deepcopy(OfflineTokenizer())
    assert tokenizer.decode(tokenizer.encode("same")) == "same"

"""`OfflineTokenizer`: the tokenizer LightRAG counts and cuts text with, with nothing to download.

LightRAG's default builds a tiktoken encoding, which fetches its BPE file from the internet on first
use and fails offline. LightRAG only needs token counts of about the right size (chunking, budgets)
and a `decode` that gives back the exact text of a slice of tokens, so a deterministic pre-tokenizer
is enough: text is split into word-like pieces of at most a few characters (roughly what BPE does
for English prose, about four characters a token), and each piece's UTF-8 bytes are the token id.
Encoding is stateless, so it is thread-safe and survives `copy.deepcopy`, as LightRAG requires.
"""

from __future__ import annotations

import functools
import re

# A space joins the word after it, as in BPE; long words, numbers and punctuation runs are cut into
# short pieces. Every character matches one of the branches, so joining the pieces gives the text back.
# CJK scripts get one to two characters a token, as BPE gives them.
_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af"
_PIECE = re.compile(
    rf" ?[{_CJK}]{{1,2}}| ?[^\W\d_{_CJK}]{{1,6}}| ?\d{{1,3}}| ?[^\w\s]{{1,3}}|\s{{1,8}}|_{{1,4}}", re.UNICODE
)
PIECE_CACHE_SIZE = 65_536
# A leading 0x01 byte keeps pieces that start with NUL bytes distinct.
_MARKER = b"\x01"


class OfflineTokenizer:
    """Deterministic, reversible tokenizer; the model name is only a label for LightRAG."""

    def encode(self, content: str) -> list[int]:
        pieces = _PIECE.findall(content)
        if sum(map(len, pieces)) == len(content):  # every character matched a branch (nearly always)
            return [_piece_id(piece) for piece in pieces]
        tokens: list[int] = []
        position = 0
        for match in _PIECE.finditer(content):
            if match.start() != position:  # a character no branch knows: its own token
                tokens.extend(_piece_id(char) for char in content[position : match.start()])
            tokens.append(_piece_id(match.group()))
            position = match.end()
        tokens.extend(_piece_id(char) for char in content[position:])
        return tokens

    def decode(self, tokens: list[int]) -> str:
        return b"".join(_piece_bytes(token) for token in tokens).decode("utf-8", errors="replace")

    def count(self, content: str) -> int:
        return len(self.encode(content))


# Words repeat: a piece's id is looked up far more often than made (the query path counts the same
# entity descriptions and excerpts on every message).
@functools.lru_cache(maxsize=PIECE_CACHE_SIZE)
def _piece_id(piece: str) -> int:
    return int.from_bytes(_MARKER + piece.encode("utf-8", "surrogatepass"), "big")


def _piece_bytes(token: int) -> bytes:
    raw = int(token).to_bytes((int(token).bit_length() + 7) // 8, "big")
    return raw[1:]

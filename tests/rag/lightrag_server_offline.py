"""`lightrag-server` with nothing downloaded: `python -m tests.rag.lightrag_server_offline` (as the tests run it).

LightRAG counts tokens with tiktoken, whose encodings download their BPE file on first use, which no test
may (an offline deployment puts the files in `TIKTOKEN_CACHE_DIR`; no package ships them). So before the
server starts, LightRAG is given the tokenizer the bot gives its embedded LightRAG (`OfflineTokenizer`,
about as many tokens as BPE, so the server's token budgets hold what they would hold), and the encoding
the openai embedding binding truncates its inputs with (`cl100k_base`, the fallback for a model tiktoken
does not know) is put in tiktoken's own registry of built encodings, byte-level: inputs are cut at
`EMBEDDING_TOKEN_LIMIT` bytes rather than tokens, far above what the tests send. The server is then
started as the `lightrag-server` command starts it, configured by its environment.
"""

from __future__ import annotations

from typing import Any

import tiktoken
import tiktoken.registry
from lightrag import LightRAG
from lightrag.api import lightrag_server
from lightrag.utils import Tokenizer

from bot.rag.tokenizer import OfflineTokenizer


class OfflineLightRAG(LightRAG):  # type: ignore[misc]  # lightrag ships no types
    """LightRAG with the offline tokenizer unless it is given one."""

    def __post_init__(self, *init_values: Any) -> None:
        if getattr(self, "tokenizer", None) is None:
            self.tokenizer = Tokenizer("offline", OfflineTokenizer())
        super().__post_init__(*init_values)


def register_byte_level_encoding(name: str, special_tokens: dict[str, int]) -> None:
    tiktoken.registry.ENCODINGS[name] = tiktoken.Encoding(
        name,
        pat_str=r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+",
        mergeable_ranks={bytes([byte]): byte for byte in range(256)},
        special_tokens=special_tokens,
    )


if __name__ == "__main__":
    register_byte_level_encoding("cl100k_base", {"<|endoftext|>": 100257, "<|endofprompt|>": 100276})
    lightrag_server.LightRAG = OfflineLightRAG
    lightrag_server.main()

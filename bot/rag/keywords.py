"""What in a message is worth looking up in the knowledge graph, decided without a model.

LightRAG's `local`, `global`, `hybrid` and `mix` modes look entities up by low-level keywords and
relations by high-level ones; left to itself it asks the extraction model for both on every query (a
paid call and half a second to two on the reply path). The embedded backend gives it the message
itself as both (a sentence embedder matches a sentence as well as a keyword list, and one text is
embedded instead of three). A message without a content word (a greeting) is not looked up at all.
"""

from __future__ import annotations

import re

from bot.domain.text import STOPWORDS

_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
_QUESTION_WORDS = frozenset("what when where which who whom whose why how does did do tell remember know".split())


def content_words(text: str) -> list[str]:
    """The message's words that carry its topic, in order, each once."""
    words = [word for word in _WORD.findall(text) if len(word) > 2]
    kept = [word for word in words if word.lower() not in STOPWORDS and word.lower() not in _QUESTION_WORDS]
    return list(dict.fromkeys(kept))

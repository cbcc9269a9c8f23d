"""Query keywords for LightRAG made locally, so reading the knowledge graph asks no model.

LightRAG's `local`, `global`, `hybrid` and `mix` modes look entities up by low-level keywords (names,
specific things) and relations by high-level ones (themes). Left to itself it asks the extraction
model for both on every query: a paid call and half a second to two on the reply path. Here:

- the graph's entity names found in the message (whole words, any case), the message's capitalised
  names, then its other content words; the same list serves as both levels, so LightRAG embeds one
  string, not two (the embedder's cache answers the second).

A message without a content word (a greeting) gives no keywords, and no query is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.memory.lexical_index import STOPWORDS

MAX_KEYWORDS = 12
_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
_NAME = re.compile(r"\b[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)*")
_QUESTION_WORDS = frozenset("what when where which who whom whose why how does did do tell remember know".split())


@dataclass(frozen=True)
class QueryKeywords:
    high_level: list[str]
    low_level: list[str]

    @property
    def empty(self) -> bool:
        return not self.high_level and not self.low_level


def content_words(text: str) -> list[str]:
    """The message's words that carry its topic, in order, each once."""
    words = [word for word in _WORD.findall(text) if len(word) > 2]
    kept = [word for word in words if word.lower() not in STOPWORDS and word.lower() not in _QUESTION_WORDS]
    return list(dict.fromkeys(kept))


def query_keywords(text: str, entity_names: list[str]) -> QueryKeywords:
    """LightRAG's high- and low-level keywords for `text`, given the names of the graph's entities."""
    lowered = f" {' '.join(_WORD.findall(text.lower()))} "
    entities = [name for name in entity_names if len(name) > 2 and f" {name.lower()} " in lowered]
    first_word = text.split(maxsplit=1)[0] if text.split() else ""
    names = [name for name in _NAME.findall(text) if name != first_word and name.lower() not in STOPWORDS]
    words = content_words(text)
    keywords = list(dict.fromkeys([*entities, *names, *words]))[:MAX_KEYWORDS]
    return QueryKeywords(keywords, list(keywords))

"""Text hygiene shared by everything that stores what people and models write."""

from __future__ import annotations

import hashlib
import re

# A Python str holds code points, so any surrogate in it is a lone one (JSON allows them, UTF-8 does not).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(text: str) -> str:
    """`text` with lone UTF-16 surrogates replaced by U+FFFD, so it can be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


_WORD_RUN = re.compile(r"\w+")


def normalized_words(text: str) -> str:
    """Lower-case words separated by single spaces: the text up to case, punctuation and spacing."""
    return " ".join(_WORD_RUN.findall(text.lower()))


def fingerprint_of(content: str) -> str:
    """The same text up to case, punctuation and spacing gives the same fingerprint."""
    return hashlib.sha256(normalized_words(content).encode("utf-8")).hexdigest()[:20]


# Words too common to tell what a text is about: left out of the lexical index and of the graph's keywords.
STOPWORDS = frozenset(
    """a an and are as at be but by can could did do does for from had has have he her him his how i if in
    into is it its me my no not of on or our she so than that the their them then there these they this to
    up us was we were what when where which who why will with would you your yes ok okay just also about
    assistant user""".split()
)

"""Text hygiene shared by everything that stores what people and models write."""

from __future__ import annotations

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

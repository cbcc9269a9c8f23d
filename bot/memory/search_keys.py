"""Search keys: words that carry what an item means beyond the words it says, for lexical search only.

Made whenever an item is indexed (a turn's new item, a hand-edited file read at start), off the reply
path, and never shown: the prompt shows the item's own words. Two kinds from rules, made from the item
alone:

- places: a name in the middle of a sentence that is a city of 15,000 people or more, a US state or a
  country (GeoNames, `places.tsv.gz`, made by `scripts/make_places.py`) gives its US state and its
  country, so "a shelter in Stamford" is found by "Does James live in Connecticut?";
- dates: a relative date ("yesterday", "last Friday", "next month") gives the dates it meant when the
  item was made (`said_dates`): "I ran a race last Saturday", made on 8 May 2023, is found by "in May 2023";

and one from the model, stored with the item (`MemoryItem.search_keys`) because no rule can make it again:
with `memory.llmExtractionEnabled`, the facts the extraction call drew from an exchange and the words it
gave for what the exchange is about, so "Which meat does Audrey prefer?" finds the exchange about a
chicken pot pie through its fact "Audrey likes chicken dishes". A rebuilt index reads them from the
files; a hand edit of the item's content drops them.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections.abc import Iterable
from pathlib import Path

from bot.domain.memory import MemoryItem
from bot.memory.temporal import said_dates

PLACES_TABLE = Path(__file__).with_name("places.tsv.gz")
LONGEST_PLACE_WORDS = 3
# A run of capitalised words after a lower-case word, a comma or "in"/"to" ...: a name, not the first
# word of a sentence.
_NAME_RUN = re.compile(r"(?<=[a-z0-9,;] )[A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2}")


@functools.cache
def places() -> dict[str, str]:
    """Each place's lower-cased name: the words of its region and country ("stamford": "Connecticut United States")."""
    table: dict[str, str] = {}
    for line in gzip.decompress(PLACES_TABLE.read_bytes()).decode().splitlines():
        name, region, country = line.split("\t")
        table[name] = f"{region} {country}".strip()
    return table


def place_keys(text: str) -> list[str]:
    """The regions and countries of the places `text` names mid-sentence (the longest name that is a place)."""
    table = places()
    keys: list[str] = []
    for run in _NAME_RUN.findall(text):
        words = run.split(" ")
        start = 0
        while start < len(words):
            for end in range(min(len(words), start + LONGEST_PLACE_WORDS), start, -1):
                found = table.get(" ".join(words[start:end]).lower().removesuffix("'s"))
                if found:
                    keys.append(found)
                    start = end
                    break
            else:
                start += 1
    return keys


def unique_keys(keys: Iterable[str]) -> list[str]:
    """`keys` in their order, each once up to case (the first spelling kept)."""
    unique: dict[str, str] = {}
    for key in keys:
        unique.setdefault(key.lower(), key)
    return list(unique.values())


def search_keys(item: MemoryItem) -> str:
    """The words an item is found by besides its own (empty when there are none)."""
    keys = place_keys(item.content)
    keys += [said.label() for said in said_dates(item.content, item.created_at)]
    keys += item.search_keys
    return " ".join(keys)

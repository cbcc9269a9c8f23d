"""`FactsTable`: every stored item's `ItemFacts`, and the order of the items of each day file, in RAM.

Retrieval scores several hundred candidates a message in a large memory, with the turns around each and
theirs: read from the index database, their facts and neighbours would cost queries on every message (and
subqueries per candidate for the neighbours); here they are dictionary lookups. The table follows the rows of
the index database's `items` table: it is loaded from them when the store opens the database (the
reconciler), and told of every row written or deleted after, by the write path and the reconciler once their
transaction is committed, so it never holds what the database would not give.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable
from datetime import date
from typing import Any

from bot.domain.memory import MemoryLayer
from bot.memory.item_storage import ItemFacts

_LAYERS = {layer.value: layer for layer in MemoryLayer}

# The columns of an `items` row the table keeps, in the order of `index_sql.all_facts` (and `ItemRows.facts`):
# id, layer, active, day, speaker, updated, salience, confidence, day_file, file, pos.
FactsRow = tuple[Any, ...]

# A place is kept as file number × this + position (positions in a file stay far below it).
_FILE_STEP = 1 << 40


class FactsTable:
    """The `ItemFacts` of every row of `items`, and for the rows of day files their order in the file (the
    items just before and after one are its neighbours: the turns around it)."""

    def __init__(self) -> None:
        self._facts: dict[str, ItemFacts] = {}
        # Items of day files: where each is (its file's number times `_FILE_STEP`, plus its position: one int
        # an item, not a tuple), and per file number the positions in order with the ids in that order.
        self._place: dict[str, int] = {}
        self._files: dict[int, tuple[array[int], list[str]]] = {}
        self._file_numbers: dict[str, int] = {}
        # One object per day and per speaker (a year of turns holds 365 days, and a few speakers).
        self._days: dict[int, date] = {}
        self._speakers: dict[str, str] = {}
        # How many active items each speaker speaks in (`speaks`).
        self._spoken: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._facts)

    def clear(self) -> None:
        self._facts.clear()
        self._place.clear()
        self._files.clear()
        self._spoken.clear()

    def load(self, rows: Iterable[FactsRow]) -> None:
        """Start from `rows` (every row of `items`, in any order)."""
        self.clear()
        facts, place, made = self._facts, self._place, self._made
        unsorted: dict[int, list[tuple[int, str]]] = {}
        for row in rows:
            item_id = row[0]
            facts[item_id] = made(row)
            self._count_speaker(facts[item_id], 1)
            if row[8]:
                number = self._file_number(row[9])
                place[item_id] = number * _FILE_STEP + row[10]
                unsorted.setdefault(number, []).append((row[10], item_id))
        for number, entries in unsorted.items():
            entries.sort()
            self._files[number] = (array("q", [pos for pos, _ in entries]), [item_id for _, item_id in entries])

    def put(self, rows: Iterable[FactsRow]) -> None:
        """Rows written: new ones, or ones that replace the row of their id (in its place or another)."""
        for row in rows:
            item_id = row[0]
            self._unplace(item_id)
            self._count_speaker(self._facts.get(item_id), -1)
            self._facts[item_id] = facts = self._made(row)
            self._count_speaker(facts, 1)
            if row[8]:
                number, pos = self._file_number(row[9]), row[10]
                self._place[item_id] = number * _FILE_STEP + pos
                positions, ids = self._files.setdefault(number, (array("q"), []))
                at = bisect_left(positions, pos)
                positions.insert(at, pos)
                ids.insert(at, item_id)

    def remove(self, item_ids: Iterable[str]) -> None:
        """Rows deleted."""
        for item_id in item_ids:
            self._unplace(item_id)
            self._count_speaker(self._facts.pop(item_id, None), -1)

    def _count_speaker(self, facts: ItemFacts | None, change: int) -> None:
        if facts is not None and facts.active and facts.speaker is not None:
            count = self._spoken.get(facts.speaker, 0) + change
            if count:
                self._spoken[facts.speaker] = count
            else:
                del self._spoken[facts.speaker]

    def _file_number(self, name: str) -> int:
        number = self._file_numbers.get(name)
        if number is None:
            number = self._file_numbers[name] = len(self._file_numbers)
        return number

    def _unplace(self, item_id: str) -> None:
        place = self._place.pop(item_id, None)
        if place is None:
            return
        number, pos = divmod(place, _FILE_STEP)
        positions, ids = self._files[number]
        at = bisect_left(positions, pos)
        del positions[at], ids[at]
        if not ids:
            del self._files[number]

    def _made(self, row: FactsRow) -> ItemFacts:
        day = self._days.get(row[3])
        if day is None:
            day = self._days[row[3]] = date.fromordinal(row[3])
        speaker = row[4] if row[4] is None else self._speakers.setdefault(row[4], row[4])
        return ItemFacts(row[0], _LAYERS[row[1]], bool(row[2]), day, speaker, row[5], row[6], row[7])

    # -- reading -------------------------------------------------------------------------------------

    def facts_of(self, item_ids: Iterable[str]) -> dict[str, ItemFacts]:
        """The facts of the stored items of `item_ids`, in that order."""
        known = self._facts
        return {item_id: facts for item_id in item_ids if (facts := known.get(item_id)) is not None}

    def speaks(self, name: str) -> bool:
        """Whether `name` speaks in some active item (see `MemoryItem.speaker`)."""
        return name in self._spoken

    def neighbour_ids(self, item_ids: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the items just before and after each of `item_ids` in its day file, in that order (none for
        an item of another file, or not stored)."""
        found: dict[str, list[str]] = {}
        for item_id in item_ids:
            place = self._place.get(item_id)
            if place is None:
                found[item_id] = []
                continue
            number, pos = divmod(place, _FILE_STEP)
            positions, ids = self._files[number]
            at = bisect_left(positions, pos)
            found[item_id] = ids[max(at - 1, 0) : at] + ids[at + 1 : at + 2]
        return found

    def episodic_neighbours(self, item_ids: Iterable[str]) -> dict[str, list[ItemFacts]]:
        """The facts of the active EPISODIC items among the `neighbour_ids` of each of `item_ids`.

        One loop for the several hundred candidates of a message (a call per candidate costs about as much)."""
        known, places, files = self._facts, self._place, self._files
        episodic = MemoryLayer.EPISODIC
        found: dict[str, list[ItemFacts]] = {}
        for item_id in item_ids:
            around: list[ItemFacts] = []
            found[item_id] = around
            place = places.get(item_id)
            if place is None:
                continue
            number, pos = divmod(place, _FILE_STEP)
            positions, ids = files[number]
            at = bisect_left(positions, pos)
            if at > 0 and (facts := known[ids[at - 1]]).active and facts.layer is episodic:
                around.append(facts)
            if at + 1 < len(ids) and (facts := known[ids[at + 1]]).active and facts.layer is episodic:
                around.append(facts)
        return found

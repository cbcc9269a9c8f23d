"""`FactsTable`: every stored item's scoring facts, and the order of the items of each day file, in RAM.

Retrieval scores about a thousand candidates a message in a large memory, with the turns around each and
theirs: read from the index database, their facts and neighbours would cost queries on every message (and
subqueries per candidate for the neighbours). Here they are columns: one numpy array per fact, a row per item
(`rows_of` maps ids to rows), and for the turns of a day file the rows just before and after each, so that
retrieval reads a candidate's facts and neighbours by gathers over arrays, not object by object. The table
follows the rows of the index database's `items` table: it is loaded from them when the store opens the
database (the reconciler), and told of every row written or deleted after, by the write path and the
reconciler once their transaction is committed, so it never holds what the database would not give.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from datetime import date
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from bot.memory.item_storage import EPISODIC_CODE, LAYERS, NO_ROW, IntArray, ItemFacts

_LAYER_CODES = {layer.value: code for code, layer in enumerate(LAYERS)}

# The columns of an `items` row the table keeps, in the order of `index_sql.all_facts` (and `ItemRows.facts`):
# id, layer, active, day, speaker, updated, salience, confidence, day_file, file, pos.
FactsRow = tuple[Any, ...]

# A place is kept as file number × this + position (positions in a file stay far below it).
_FILE_STEP = 1 << 40
_FIRST_CAPACITY = 1024


class FactsTable:
    """The `ItemFacts` of every row of `items` as columns (`FactsColumns`), and for the rows of day files their
    order in the file (the items just before and after one are its neighbours: the turns around it). A deleted
    item's row is given to the next new one."""

    def __init__(self) -> None:
        self._row: dict[str, int] = {}
        self._ids: list[str] = []  # by row; "" for a free row
        self._free: list[int] = []
        self.layer: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self.active: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self.day: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.speaker: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.updated: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        self.salience: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        self.confidence: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        self.before: IntArray = np.zeros(0, dtype=np.int64)
        self.after: IntArray = np.zeros(0, dtype=np.int64)
        # Where an item of a day file is: its file's number times `_FILE_STEP`, plus its position (`NO_ROW` for
        # an item of another file).
        self.place: IntArray = np.zeros(0, dtype=np.int64)
        self._grow(_FIRST_CAPACITY)
        # Per day file's number, the positions of its items in order, with their ids in that order.
        self._files: dict[int, tuple[array[int], list[str]]] = {}
        self._file_numbers: dict[str, int] = {}
        # One code per speaker (a few), and one date per day (a year of turns holds 365) for `facts_of`.
        self._speaker_code: dict[str, int] = {}
        self._speaker_names: list[str] = []
        self._days: dict[int, date] = {}
        # How many active items each speaker speaks in (`speaks`).
        self._spoken: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._row

    def _columns(self) -> tuple[npt.NDArray[Any], ...]:
        return (
            self.layer, self.active, self.day, self.speaker, self.updated, self.salience, self.confidence,
            self.before, self.after, self.place,
        )  # fmt: skip

    def _grow(self, capacity: int) -> None:
        """Room for `capacity` rows (the new rows of no item, with no neighbours)."""
        old = len(self.layer)
        if capacity <= old:
            return
        (
            self.layer, self.active, self.day, self.speaker, self.updated, self.salience, self.confidence,
            self.before, self.after, self.place,
        ) = (np.resize(column, capacity) for column in self._columns())  # fmt: skip
        self.active[old:] = False
        self.speaker[old:] = NO_ROW
        self.before[old:] = NO_ROW
        self.after[old:] = NO_ROW
        self.place[old:] = NO_ROW

    def clear(self) -> None:
        self._row.clear()
        self._ids.clear()
        self._free.clear()
        self._files.clear()
        self._spoken.clear()
        self.active[:] = False
        self.before[:] = NO_ROW
        self.after[:] = NO_ROW
        self.place[:] = NO_ROW

    def load(self, rows: Iterable[FactsRow]) -> None:
        """Start from `rows` (every row of `items`, in any order)."""
        self.clear()
        row_of = self._row
        columns: list[list[Any]] = [[] for _ in range(7)]
        layer, active, day, speaker, updated, salience, confidence = columns
        unsorted: dict[int, list[tuple[int, int]]] = {}
        for row in rows:
            item_id = row[0]
            if item_id in row_of:  # one row an id; the database gives none twice
                continue
            number = len(self._ids)
            row_of[item_id] = number
            self._ids.append(item_id)
            layer.append(_LAYER_CODES[row[1]])
            active.append(bool(row[2]))
            day.append(row[3])
            speaker.append(self._speaker(row[4]))
            updated.append(row[5])
            salience.append(row[6])
            confidence.append(row[7])
            if row[2] and row[4] is not None:
                self._spoken[row[4]] = self._spoken.get(row[4], 0) + 1
            if row[8]:
                file = self._file_number(row[9])
                unsorted.setdefault(file, []).append((row[10], number))
        count = len(self._ids)
        self._grow(max(count, _FIRST_CAPACITY))
        for column, values in zip(self._columns(), columns, strict=False):
            column[:count] = values
        ids = self._ids
        for file, entries in unsorted.items():
            entries.sort()
            in_order = np.array([number for _, number in entries], dtype=np.int64)
            self.place[in_order] = file * _FILE_STEP + np.array([pos for pos, _ in entries], dtype=np.int64)
            self.before[in_order[1:]] = in_order[:-1]
            self.after[in_order[:-1]] = in_order[1:]
            self._files[file] = (array("q", [pos for pos, _ in entries]), [ids[number] for _, number in entries])

    def put(self, rows: Iterable[FactsRow]) -> None:
        """Rows written: new ones, or ones that replace the row of their id (in its place or another)."""
        for row in rows:
            item_id = row[0]
            number = self._row.get(item_id)
            if number is None:
                number = self._new_row(item_id)
            else:
                self._unplace(number)
                self._count_speaker(number, -1)
            self.layer[number] = _LAYER_CODES[row[1]]
            self.active[number] = bool(row[2])
            self.day[number] = row[3]
            self.speaker[number] = self._speaker(row[4])
            self.updated[number] = row[5]
            self.salience[number] = row[6]
            self.confidence[number] = row[7]
            self._count_speaker(number, 1)
            if row[8]:
                self._place_at(item_id, number, self._file_number(row[9]), row[10])

    def remove(self, item_ids: Iterable[str]) -> None:
        """Rows deleted."""
        for item_id in item_ids:
            number = self._row.pop(item_id, None)
            if number is None:
                continue
            self._unplace(number)
            self._count_speaker(number, -1)
            self.active[number] = False
            self._ids[number] = ""
            self._free.append(number)

    def _new_row(self, item_id: str) -> int:
        if self._free:
            number = self._free.pop()
            self._ids[number] = item_id
        else:
            number = len(self._ids)
            self._ids.append(item_id)
            if number == len(self.layer):
                self._grow(2 * number)
        self._row[item_id] = number
        return number

    def _speaker(self, name: str | None) -> int:
        if name is None:
            return NO_ROW
        code = self._speaker_code.get(name)
        if code is None:
            code = self._speaker_code[name] = len(self._speaker_names)
            self._speaker_names.append(name)
        return code

    def _count_speaker(self, number: int, change: int) -> None:
        code = int(self.speaker[number])
        if self.active[number] and code != NO_ROW:
            name = self._speaker_names[code]
            count = self._spoken.get(name, 0) + change
            if count:
                self._spoken[name] = count
            else:
                del self._spoken[name]

    def _file_number(self, name: str) -> int:
        number = self._file_numbers.get(name)
        if number is None:
            number = self._file_numbers[name] = len(self._file_numbers)
        return number

    def _place_at(self, item_id: str, number: int, file: int, pos: int) -> None:
        """The row `number` of `item_id` put at `pos` in its day file, between the turns around it."""
        self.place[number] = file * _FILE_STEP + pos
        positions, ids = self._files.setdefault(file, (array("q"), []))
        at = bisect_left(positions, pos)
        positions.insert(at, pos)
        ids.insert(at, item_id)
        before = self._row[ids[at - 1]] if at > 0 else NO_ROW
        after = self._row[ids[at + 1]] if at + 1 < len(ids) else NO_ROW
        self.before[number], self.after[number] = before, after
        if before != NO_ROW:
            self.after[before] = number
        if after != NO_ROW:
            self.before[after] = number

    def _unplace(self, number: int) -> None:
        place = int(self.place[number])
        if place == NO_ROW:
            return
        self.place[number] = NO_ROW
        file, pos = divmod(place, _FILE_STEP)
        positions, ids = self._files[file]
        at = bisect_left(positions, pos)
        del positions[at], ids[at]
        if not ids:
            del self._files[file]
        before, after = int(self.before[number]), int(self.after[number])
        if before != NO_ROW:
            self.after[before] = after
        if after != NO_ROW:
            self.before[after] = before
        self.before[number] = self.after[number] = NO_ROW

    # -- reading -------------------------------------------------------------------------------------

    def rows_of(self, item_ids: Iterable[str]) -> IntArray:
        """The row of each of `item_ids`, in that order (`NO_ROW` for one not stored)."""
        return np.fromiter(map(self._row.get, item_ids, repeat(NO_ROW)), dtype=np.int64)

    def ids_at(self, rows: Sequence[int]) -> list[str]:
        """The id of each of `rows` (rows of stored items)."""
        ids = self._ids
        return [ids[row] for row in rows]

    def speaker_codes(self, names: Iterable[str]) -> list[int]:
        """The codes in `speaker` of those of `names` that speak in some item."""
        return [code for name in names if (code := self._speaker_code.get(name)) is not None]

    def episodic_at(self, rows: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each of `rows` is an active EPISODIC item (False for `NO_ROW`)."""
        safe = np.maximum(rows, 0)
        episodic: npt.NDArray[np.bool_] = (rows != NO_ROW) & self.active[safe] & (self.layer[safe] == EPISODIC_CODE)
        return episodic

    def around(self, row: int) -> list[int]:
        """The rows of the active EPISODIC items just before and after `row` in its day file, in that order."""
        found = []
        for other in (int(self.before[row]), int(self.after[row])):
            if other != NO_ROW and self.active[other] and self.layer[other] == EPISODIC_CODE:
                found.append(other)
        return found

    def facts_at(self, row: int) -> ItemFacts:
        ordinal = int(self.day[row])
        day = self._days.get(ordinal)
        if day is None:
            day = self._days[ordinal] = date.fromordinal(ordinal)
        code = int(self.speaker[row])
        return ItemFacts(
            self._ids[row],
            LAYERS[self.layer[row]],
            bool(self.active[row]),
            day,
            None if code == NO_ROW else self._speaker_names[code],
            float(self.updated[row]),
            float(self.salience[row]),
            float(self.confidence[row]),
        )

    def facts_of(self, item_ids: Iterable[str]) -> dict[str, ItemFacts]:
        """The facts of the stored items of `item_ids`, in that order."""
        known = self._row
        return {item_id: self.facts_at(row) for item_id in item_ids if (row := known.get(item_id)) is not None}

    def speaks(self, name: str) -> bool:
        """Whether `name` speaks in some active item (see `MemoryItem.speaker`)."""
        return name in self._spoken

    def neighbour_ids(self, item_ids: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the items just before and after each of `item_ids` in its day file, in that order (none for
        an item of another file, or not stored)."""
        known, ids = self._row, self._ids
        found: dict[str, list[str]] = {}
        for item_id in item_ids:
            row = known.get(item_id)
            around = () if row is None else (int(self.before[row]), int(self.after[row]))
            found[item_id] = [ids[other] for other in around if other != NO_ROW]
        return found

    def episodic_neighbours(self, item_ids: Iterable[str]) -> dict[str, list[ItemFacts]]:
        """The facts of the active EPISODIC items among the `neighbour_ids` of each of `item_ids`."""
        known = self._row
        found: dict[str, list[ItemFacts]] = {}
        for item_id in item_ids:
            row = known.get(item_id)
            found[item_id] = [] if row is None else [self.facts_at(other) for other in self.around(row)]
        return found

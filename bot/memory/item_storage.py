"""What the memory asks of an item store: `ItemStore`, the interface `MemoryItemStore` implements over the
JSONL files and their SQLite index, and that another backend implements to take its place.

The pipeline and the memory service see items only through it: lookups by id, the queries retrieval and
the pack need (`ItemFacts` for scoring without parsing), the write path (append, replace, relocate,
remove, then `flush` to make it durable), and the version that lets derived results be kept.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem, MemoryLayer


class ItemFacts(NamedTuple):
    """What retrieval ranks an item by, read from its columns in the index without parsing its line."""

    id: str
    layer: MemoryLayer
    active: bool
    day: date  # the day it was made, in the bot's time zone
    speaker: str | None
    updated: float  # `updated_at`, in seconds since the epoch
    salience: float
    confidence: float


# The layers in the order of their codes in `FactsColumns.layer`.
LAYERS = tuple(MemoryLayer)
EPISODIC_CODE = LAYERS.index(MemoryLayer.EPISODIC)
# No row: the neighbour of the first or last turn of a file, the row of an id not stored, no speaker.
NO_ROW = -1

IntArray = npt.NDArray[np.int64]


class FactsColumns(Protocol):
    """Every stored item's `ItemFacts` as columns, a row per item (`rows_of`), which retrieval scores its
    candidates by with array operations rather than object by object: `layer` an index into `LAYERS`, `day`
    the day's ordinal, `speaker` a code (`speaker_codes`, `NO_ROW` for none), and for the turns of a day file
    `before` and `after`, the rows of the items just before and after each (`NO_ROW` at either end, and for an
    item of another file). Read under the scope's lock, like every other read."""

    @property
    def layer(self) -> npt.NDArray[np.int8]: ...

    @property
    def active(self) -> npt.NDArray[np.bool_]: ...

    @property
    def day(self) -> npt.NDArray[np.int32]: ...

    @property
    def speaker(self) -> npt.NDArray[np.int32]: ...

    @property
    def updated(self) -> npt.NDArray[np.float64]: ...

    @property
    def salience(self) -> npt.NDArray[np.float64]: ...

    @property
    def confidence(self) -> npt.NDArray[np.float64]: ...

    @property
    def before(self) -> IntArray: ...

    @property
    def after(self) -> IntArray: ...

    def __contains__(self, item_id: str) -> bool: ...

    def rows_of(self, item_ids: Iterable[str]) -> IntArray:
        """The row of each of `item_ids`, in that order (`NO_ROW` for one not stored)."""
        ...

    def ids_at(self, rows: Sequence[int]) -> list[str]:
        """The id of each of `rows` (rows of stored items)."""
        ...

    def speaker_codes(self, names: Iterable[str]) -> list[int]:
        """The codes in `speaker` of those of `names` that speak in some item."""
        ...

    def episodic_at(self, rows: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each of `rows` is an active EPISODIC item (False for `NO_ROW`)."""
        ...

    def around(self, row: int) -> list[int]:
        """The rows of the active EPISODIC items just before and after `row` in its day file, in that order."""
        ...


class ItemIndex(Protocol):
    """Something derived from the items (a search index) that follows every change."""

    def add(self, item: MemoryItem) -> None: ...

    def add_many(self, items: list[MemoryItem]) -> None: ...

    def remove(self, item_id: str) -> None: ...

    def clear(self) -> None: ...


class ItemStore(Protocol):
    """Every item of one memory scope. Reads and changes are serialised by the scope's lock; `flush` is
    awaited after it is released, so that concurrent turns share one durable write."""

    # -- following changes ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Bumped by every change of the items."""
        ...

    def appended_since(self, version: int) -> list[str] | None:
        """The ids of the items added since `version` when nothing else changed meanwhile; None otherwise."""
        ...

    def subscribe(self, index: ItemIndex) -> None:
        """Keep `index` in step from now on (it is given every item already loaded)."""
        ...

    async def refresh(self) -> None:
        """Bring what `refresh_sync` reads up to date with changes another process made, where reaching
        them takes I/O the event loop must await (a store shared through a database); awaited first."""
        ...

    def refresh_sync(self) -> bool:
        """Take up changes made to the store from outside (hand edits); True when anything changed."""
        ...

    @property
    def skipped_lines(self) -> int:
        """Stored lines that are not valid items (kept, left out of memory)."""
        ...

    def close(self) -> None: ...

    # -- reading -------------------------------------------------------------------------------------

    def __len__(self) -> int: ...

    def get(self, item_id: str) -> MemoryItem | None: ...

    def get_many(self, item_ids: Iterable[str]) -> dict[str, MemoryItem]:
        """The stored items of `item_ids` in that order (those not stored are left out)."""
        ...

    def items(self) -> Iterable[MemoryItem]:
        """Every item, active or not."""
        ...

    def in_layer(self, layer: MemoryLayer) -> list[MemoryItem]: ...

    def recently_updated(self, limit: int) -> list[MemoryItem]: ...

    def recent_episodic(self, limit: int, since: datetime, skip: Callable[[str], bool]) -> list[MemoryItem]: ...

    def newest_in_layer(self, layer: MemoryLayer, limit: int) -> list[MemoryItem]:
        """The `limit` active items of one layer changed last, newest first."""
        ...

    def superseded(self) -> list[MemoryItem]:
        """Every item a newer version replaced (kept for history)."""
        ...

    def count_by_layer(self) -> dict[MemoryLayer, int]: ...

    def find_by_fingerprint(self, fingerprint: str, layer: MemoryLayer | None = None) -> MemoryItem | None: ...

    def find_by_key(self, key: str, layer: MemoryLayer) -> list[MemoryItem]: ...

    def superseded_by(self, newer: MemoryItem) -> list[MemoryItem]: ...

    def referring_to(self, references: Iterable[str]) -> list[MemoryItem]: ...

    def ids_referring_to(self, references: Iterable[str]) -> list[str]: ...

    def referring_among(self, item_ids: Collection[str], references: AbstractSet[str]) -> set[str]: ...

    def is_referenced(self, reference: str) -> bool: ...

    def core(self, limit: int) -> list[MemoryItem]: ...

    def pinned(self) -> list[MemoryItem]: ...

    def shared(self) -> list[MemoryItem]: ...

    def speakers_among(self, names: Iterable[str]) -> set[str]: ...

    @property
    def facts_table(self) -> FactsColumns:
        """Every stored item's facts as columns, which retrieval scores its candidates by."""
        ...

    # -- writing -------------------------------------------------------------------------------------

    def file_for(self, item: MemoryItem) -> Path:
        """Where a new item belongs (its layer's file, or day file)."""
        ...

    def file_of(self, item_id: str) -> Path | None:
        """The file a stored item is in (None: not stored)."""
        ...

    def append(self, items: list[MemoryItem]) -> None: ...

    def replace(self, items: list[MemoryItem]) -> None: ...

    def relocate(self, item: MemoryItem) -> None: ...

    def remove(self, item_ids: list[str]) -> list[MemoryItem]: ...

    @property
    def dirty(self) -> bool:
        """Whether changes wait for `flush`."""
        ...

    async def flush(self, durable: bool = True) -> None: ...

"""`ItemCaches`: what `MemoryItemStore` keeps in RAM beside its index database, and the version that says
when it is stale.

- the store's version, bumped by every change, and the append log: which ids the pure appends (new
  items, nothing else changed) added since a version, so a result derived from the items (a search, a
  ranking) can be brought up to date instead of made again;
- the recently parsed items (a small LRU: the pinned, the core and what the last prompts' packs read);
- every item's facts and place among the turns of its day (`FactsTable`: what retrieval scores by), kept in
  step with the index database's rows by the store;
- the chosen lists (pinned, shared, core), valid while no change touched such an item.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.item_facts import FactsTable

# Parsed items kept for reuse (about 3 KB each): the pinned, the core and what the last prompts' packs read
# (about 70 a prompt at 100,000 items: candidates are scored from their facts, not parsed). A topic's best
# matches come back message after message: the packs of the last few dozen messages are kept.
ITEM_CACHE_SIZE = 4096
# Appends remembered for `appended_since` (a few minutes of a busy scope; past it, derived results start over).
APPEND_LOG_SIZE = 1024
# SEMANTIC items this salient (names, constraints) are worth a prompt even without a word in common.
CORE_SALIENCE = 0.8


def is_pinned(item: MemoryItem) -> bool:
    return item.active and item.pinned


def is_shared(item: MemoryItem) -> bool:
    return item.active and item.shared


def is_core(item: MemoryItem) -> bool:
    return item.active and item.layer is MemoryLayer.SEMANTIC and item.salience >= CORE_SALIENCE


class ItemCaches:
    """The store's version and what it keeps in RAM for it (see the module's doc)."""

    def __init__(self) -> None:
        self.version = 0
        # Bumped by changes that may change the pinned, shared or core items: the chosen lists stay until then.
        self._chosen_version = 0
        self._chosen: dict[Hashable, tuple[int, list[MemoryItem]]] = {}
        # The ids added by the pure appends since `_append_log_start`, with the version each made.
        self._append_log: list[tuple[int, str]] = []
        self._append_log_start = 0
        self._items: OrderedDict[str, MemoryItem] = OrderedDict()
        # Told of every row the store writes or deletes in the index database (`StoreState`).
        self.facts = FactsTable()

    # -- the version -------------------------------------------------------------------------------

    def bump(self, appended: list[MemoryItem] | None = None) -> None:
        """A new version, after a change; `appended`: the change was only these new items."""
        self.version += 1
        if appended is None or any(is_pinned(item) or is_shared(item) or is_core(item) for item in appended):
            self._chosen_version = self.version
        if appended is None or len(self._append_log) >= APPEND_LOG_SIZE:
            self._append_log.clear()
            self._append_log_start = self.version
        else:
            self._append_log += [(self.version, item.id) for item in appended]

    def appended_since(self, version: int) -> list[str] | None:
        """The ids of the items added since `version` when nothing else changed meanwhile; None otherwise."""
        if version < self._append_log_start:
            return None
        log = self._append_log
        first = len(log)
        while first > 0 and log[first - 1][0] > version:
            first -= 1
        return [item_id for _, item_id in log[first:]]

    def changed(self, items: list[MemoryItem], appended: bool = False) -> None:
        """`items` were stored (new versions kept parsed); `appended`: as new items, nothing else changed."""
        self.bump(appended=items if appended else None)
        for item in items:
            self._items.pop(item.id, None)
            self.remember(item)

    # -- parsed items ------------------------------------------------------------------------------

    def item(self, item_id: str) -> MemoryItem | None:
        return self._items.get(item_id)

    def remember(self, item: MemoryItem) -> MemoryItem:
        self._items[item.id] = item
        if len(self._items) > ITEM_CACHE_SIZE:
            self._items.popitem(last=False)
        return item

    def forget(self, item_ids: Iterable[str]) -> None:
        for item_id in item_ids:
            self._items.pop(item_id, None)

    def forget_all(self) -> None:
        self._items.clear()

    # -- chosen lists ------------------------------------------------------------------------------

    def chosen(self, key: Hashable) -> list[MemoryItem] | None:
        """The list kept under `key` (pinned, shared, core and its limit) while still valid."""
        kept = self._chosen.get(key)
        return kept[1] if kept is not None and kept[0] == self._chosen_version else None

    def keep_chosen(self, key: Hashable, items: list[MemoryItem]) -> list[MemoryItem]:
        self._chosen[key] = (self._chosen_version, items)
        return items

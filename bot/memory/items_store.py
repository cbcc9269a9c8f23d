"""`MemoryItemStore`: the JSONL files of `memory/items/` are the only store; this is their live view.

Each layer has its files (CONTRACT): `episodic/YYYY-MM-DD.jsonl` (the day the item was made, in the
bot's time zone), `semantic.jsonl`, `procedural.jsonl`. The store keeps every item in memory and
re-reads a file whenever its size, mtime or inode changed, so hand edits and deletions are picked up
on the next use. Appends go through `append_lines`; every other change rewrites the whole file with
`write_atomic`. Indexes subscribe as `ItemIndex` and are told of every item added or removed.

Changes are made in memory first and written by `flush`, which callers await after releasing the
scope's lock: concurrent turns then share one durable write (group commit) instead of queueing for
an fsync each. In-memory reads and changes are not safe across threads: `MemoryScope.lock`
serialises them.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.storage.files import append_lines, write_atomic
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths

log = logging.getLogger(__name__)

FileSignature = tuple[int, int, int]
# SEMANTIC items this salient (names, constraints) are worth a prompt even without a word in common.
CORE_SALIENCE = 0.8


class ItemIndex(Protocol):
    """Something derived from the items (a search index) that follows every change."""

    def add(self, item: MemoryItem) -> None: ...

    def add_many(self, items: list[MemoryItem]) -> None: ...

    def remove(self, item_id: str) -> None: ...


@dataclass(frozen=True)
class KeptLine:
    """A line of an items file that is not a valid item: skipped when read, written back as it was."""

    text: str


@dataclass
class ParsedItems:
    """A JSONL file read: its valid items, and its layout (item ids and kept lines, in file order)."""

    items: list[MemoryItem]
    layout: list[str | KeptLine]
    skipped: int
    # The last line is whole (an item or a kept line) but has no newline after it, as editors that
    # save without a final newline leave it: an append must not cut it off as a torn tail.
    unterminated: bool = False


def parse_item_file(text: str, source: Path, zone: tzinfo = UTC) -> ParsedItems:
    """Every valid item of a JSONL file's text; other lines are skipped with one warning each.

    A hand-edited file is input, not trusted data: a line that is not JSON, has an unknown layer, an
    unreadable date or misses a field is skipped, counted and kept (its text goes back into the file
    on every rewrite); a time without a zone is read in `zone`. Only a torn last line (no newline
    after it: a crash cut the last append short) is dropped, which repairs it on the next rewrite.
    Parsed straight from JSON by pydantic (three times faster than `json.loads` and validating, which
    is most of the start-up time at 100,000 items).
    """
    parsed = ParsedItems([], [], 0)
    context = {"zone": zone}
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = MemoryItem.model_validate_json(line, context=context)
        except ValidationError as error:
            problem = error.errors()[0]
            torn_tail = number == len(lines) and problem["type"] == "json_invalid"
            if torn_tail:
                log.warning("[Memory] Skipped torn last line %d of %s", number, source)
                continue
            where = ".".join(str(part) for part in problem["loc"]) or "line"
            log.warning(
                "[Memory] Skipped line %d of %s (kept in the file): %s: %s", number, source, where, problem["msg"]
            )
            parsed.layout.append(KeptLine(line))
            parsed.skipped += 1
        else:
            parsed.items.append(item)
            parsed.layout.append(item.id)
        parsed.unterminated = number == len(lines)
    return parsed


def parse_items(text: str, source: Path, zone: tzinfo = UTC) -> list[MemoryItem]:
    """The valid items of a JSONL file's text (see `parse_item_file`)."""
    return parse_item_file(text, source, zone).items


def _read_raw(path: Path) -> str:
    """A file's text with undecodable bytes kept as surrogate escapes, so a rewrite gives them back."""
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return ""


def _signature(path: Path) -> FileSignature | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def _discard(lists: dict[str, list[str]], key: str, item_id: str) -> None:
    ids = lists.get(key)
    if ids is not None and item_id in ids:
        ids.remove(item_id)
        if not ids:
            del lists[key]


class _LookupIndex:
    """Active items by fingerprint and by slot key, so dedup and supersede need no scan."""

    def __init__(self) -> None:
        # Lists, not sets: almost every fingerprint has one item, and a list of one is a third the size.
        self.by_fingerprint: dict[str, list[str]] = {}
        self.by_key: dict[str, list[str]] = {}
        self.pinned: set[str] = set()
        self.core: set[str] = set()
        # Bumped whenever `core` changes, so the store's ranking of it can be cached.
        self.core_version = 0
        # How many active items refer to each message id.
        self.references: dict[str, int] = {}
        self._entries: dict[str, tuple[str, str | None, tuple[str, ...]]] = {}

    def add(self, item: MemoryItem) -> None:
        if not item.active:
            return
        self._entries[item.id] = (item.fingerprint, item.key, tuple(item.references))
        self.by_fingerprint.setdefault(item.fingerprint, []).append(item.id)
        if item.key:
            self.by_key.setdefault(item.key, []).append(item.id)
        if item.pinned:
            self.pinned.add(item.id)
        if item.layer is MemoryLayer.SEMANTIC and item.salience >= CORE_SALIENCE:
            self.core.add(item.id)
            self.core_version += 1
        for reference in item.references:
            self.references[reference] = self.references.get(reference, 0) + 1

    def add_many(self, items: list[MemoryItem]) -> None:
        for item in items:
            self.add(item)

    def remove(self, item_id: str) -> None:
        self.pinned.discard(item_id)
        if item_id in self.core:
            self.core.discard(item_id)
            self.core_version += 1
        entry = self._entries.pop(item_id, None)
        if entry is None:
            return
        fingerprint, key, references = entry
        for reference in references:
            left = self.references.pop(reference, 1) - 1
            if left > 0:
                self.references[reference] = left
        _discard(self.by_fingerprint, fingerprint, item_id)
        if key:
            _discard(self.by_key, key, item_id)


class MemoryItemStore:
    """Every item of one memory scope, kept in step with its files."""

    def __init__(self, paths: MemoryPaths, zone: tzinfo) -> None:
        self.paths = paths
        self._zone = zone
        self._items: dict[str, MemoryItem] = {}
        self._file_of: dict[str, Path] = {}
        self._ids_in: dict[Path, list[str]] = {}
        self._signatures: dict[Path, FileSignature] = {}
        # Each file's lines as last read or written: item ids and the lines kept without being items.
        self._layout: dict[Path, list[str | KeptLine]] = {}
        self._skipped: dict[Path, int] = {}
        # Files whose whole last line has no newline after it: rewritten rather than appended to.
        self._unterminated: set[Path] = set()
        self._pending_appends: dict[Path, list[str]] = {}
        self._pending_rewrites: set[Path] = set()
        self._flush_lock = asyncio.Lock()
        self._episodic_dir = paths.episodic_dir
        self._path_cache: dict[str, Path] = {}
        self._core_cache: tuple[tuple[int, int], list[MemoryItem]] | None = None
        self._day_files: list[Path] | None = None
        self._writing: set[Path] = set()
        self._lookup = _LookupIndex()
        self._indexes: list[ItemIndex] = [self._lookup]

    def subscribe(self, index: ItemIndex) -> None:
        """Keep `index` in step from now on (it is given every item already loaded)."""
        self._indexes.append(index)
        for item in self._items.values():
            index.add(item)

    # -- reading -----------------------------------------------------------------------------------

    def refresh_sync(self) -> bool:
        """Re-read every file that changed on disk since last seen; True when anything changed."""
        changed = False
        present = self._files_on_disk()
        for path in list(self._ids_in):
            if path not in present and not self._pending(path):
                self._drop_file(path)
                changed = True
        stale = [path for path, signature in present.items() if self._signatures.get(path) != signature]
        if not stale:
            return changed
        # Loading makes many objects and no reference cycles: pausing the cyclic garbage collector
        # meanwhile saves it from re-scanning the growing heap (a quarter of a large start-up).
        collecting = gc.isenabled()
        gc.disable()
        try:
            # Loaded in name order, so the later file wins for an id found twice (see `relocate`).
            for path in sorted(stale, key=str):
                if not self._pending(path):
                    self._load_file(path, present[path])
                    changed = True
        finally:
            if collecting:
                gc.enable()
        return changed

    def _files_on_disk(self) -> dict[Path, FileSignature]:
        """Every items file with its signature: one directory scan and one `stat` per file."""
        found: dict[Path, FileSignature] = {}
        try:
            with os.scandir(self._episodic_dir) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl") and entry.is_file():
                        stat = entry.stat()
                        found[self._path_for(entry.path)] = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except FileNotFoundError:
            pass
        for path in (self.paths.semantic_file, self.paths.procedural_file):
            signature = _signature(path)
            if signature is not None:
                found[path] = signature
        return found

    def _path_for(self, name: str) -> Path:
        path = self._path_cache.get(name)
        if path is None:
            path = self._path_cache[name] = Path(name)
        return path

    def _ids_of(self, path: Path) -> list[str]:
        """The ids stored in `path`, in file order (a new list for a new file)."""
        ids = self._ids_in.get(path)
        if ids is None:
            ids = self._ids_in[path] = []
            self._day_files = None
        return ids

    def _pending(self, path: Path) -> bool:
        # A file with unwritten changes is not re-read: the flush about to happen would overwrite them.
        return path in self._pending_rewrites or path in self._pending_appends or path in self._writing

    def _load_file(self, path: Path, signature: FileSignature) -> None:
        self._drop_file(path)
        loaded: dict[str, MemoryItem] = {}
        parsed = parse_item_file(_read_raw(path), path, self._zone)
        self._layout[path] = parsed.layout
        self._skipped[path] = parsed.skipped
        if parsed.unterminated:
            self._unterminated.add(path)
        for item in parsed.items:
            if item.id in self._items:
                self._forget_in_memory(item.id)  # found in an earlier file too: this one wins
            loaded[item.id] = item  # an id twice in one file: the later line wins
        for item in loaded.values():
            self._items[item.id] = item
            self._file_of[item.id] = path
        for index in self._indexes:
            index.add_many(list(loaded.values()))
        self._ids_in[path] = list(loaded)
        self._day_files = None
        self._signatures[path] = signature

    def _drop_file(self, path: Path) -> None:
        self._day_files = None
        for item_id in self._ids_in.pop(path, []):
            if self._file_of.get(item_id) == path:
                self._forget_in_memory(item_id)
        self._signatures.pop(path, None)
        self._layout.pop(path, None)
        self._unterminated.discard(path)
        self._skipped.pop(path, None)

    def _remember_in_memory(self, item: MemoryItem, path: Path) -> None:
        self._items[item.id] = item
        self._file_of[item.id] = path
        for index in self._indexes:
            index.add(item)

    def _forget_in_memory(self, item_id: str) -> None:
        self._items.pop(item_id, None)
        path = self._file_of.pop(item_id, None)
        if path is not None and item_id in self._ids_in.get(path, []):
            self._ids_in[path].remove(item_id)
        for index in self._indexes:
            index.remove(item_id)

    def get(self, item_id: str) -> MemoryItem | None:
        return self._items.get(item_id)

    def items(self) -> Iterable[MemoryItem]:
        return self._items.values()

    def count_by_layer(self) -> dict[MemoryLayer, int]:
        counts = dict.fromkeys(MemoryLayer, 0)
        for item in self._items.values():
            if item.active:
                counts[item.layer] += 1
        return counts

    def find_by_fingerprint(self, fingerprint: str, layer: MemoryLayer | None = None) -> MemoryItem | None:
        """The active item with this fingerprint (in `layer`, when given)."""
        for item_id in sorted(self._lookup.by_fingerprint.get(fingerprint, ())):
            item = self._items[item_id]
            if layer is None or item.layer is layer:
                return item
        return None

    def is_referenced(self, reference: str) -> bool:
        """Whether an active item refers to `reference` (a message id)."""
        return bool(self._lookup.references.get(reference))

    def core(self, limit: int) -> list[MemoryItem]:
        """The `limit` most salient (then newest) active SEMANTIC items of salience at least `CORE_SALIENCE`."""
        cached = self._core_cache
        if cached is not None and cached[0] == (self._lookup.core_version, limit):
            return cached[1]
        items = (self._items[item_id] for item_id in self._lookup.core)
        ranked = heapq.nlargest(limit, items, key=lambda item: (item.salience, item.updated_at))
        self._core_cache = ((self._lookup.core_version, limit), ranked)
        return ranked

    def pinned(self) -> list[MemoryItem]:
        return [self._items[item_id] for item_id in sorted(self._lookup.pinned)]

    def find_by_key(self, key: str, layer: MemoryLayer) -> list[MemoryItem]:
        """The active items filling the slot `key` in `layer`."""
        found = [self._items[item_id] for item_id in self._lookup.by_key.get(key, ())]
        return [item for item in found if item.layer is layer]

    def __len__(self) -> int:
        return len(self._items)

    def in_layer(self, layer: MemoryLayer) -> list[MemoryItem]:
        """Active items of one layer (EPISODIC means every day file: prefer `recent_episodic`)."""
        if layer is MemoryLayer.EPISODIC:
            candidates: Iterable[MemoryItem] = self._items.values()
        else:
            path = self.paths.semantic_file if layer is MemoryLayer.SEMANTIC else self.paths.procedural_file
            candidates = (self._items[item_id] for item_id in self._ids_in.get(path, []) if item_id in self._items)
        return [item for item in candidates if item.layer is layer and item.active]

    def recent_episodic(self, limit: int, skip: Callable[[MemoryItem], bool]) -> list[MemoryItem]:
        """The newest active EPISODIC items, newest first, reading day files from the latest back."""
        found: list[MemoryItem] = []
        if self._day_files is None:
            # Day files are named YYYY-MM-DD.jsonl, the only item files whose names start with a digit.
            self._day_files = sorted((p for p in self._ids_in if p.name[:1].isdigit()), key=str, reverse=True)
        day_files = self._day_files
        for path in day_files:
            day_items = [self._items[item_id] for item_id in self._ids_in[path] if item_id in self._items]
            for item in sorted(day_items, key=lambda entry: entry.created_at, reverse=True):
                if item.active and item.layer is MemoryLayer.EPISODIC and not skip(item):
                    found.append(item)
                    if len(found) >= limit:
                        return found
        return found

    def neighbours(self, item_id: str) -> list[MemoryItem]:
        """The active EPISODIC items just before and after `item_id` in its day file (a turn's context)."""
        path = self._file_of.get(item_id)
        if path is None or not path.name[:1].isdigit():
            return []
        ids = self._ids_in.get(path, [])
        try:
            position = ids.index(item_id)
        except ValueError:
            return []
        found = []
        for other in (position - 1, position + 1):
            if 0 <= other < len(ids):
                item = self._items.get(ids[other])
                if item is not None and item.active and item.layer is MemoryLayer.EPISODIC:
                    found.append(item)
        return found

    # -- writing -----------------------------------------------------------------------------------

    def file_for(self, item: MemoryItem) -> Path:
        """The file a new item belongs in."""
        if item.layer is MemoryLayer.EPISODIC:
            return self.paths.episodic_file(item.created_at.astimezone(self._zone).date())
        if item.layer is MemoryLayer.SEMANTIC:
            return self.paths.semantic_file
        return self.paths.procedural_file

    def append(self, items: list[MemoryItem]) -> None:
        """Add new items (written by the next `flush`, one durable append per file)."""
        for item in items:
            path = self.file_for(item)
            self._remember_in_memory(item, path)
            self._ids_of(path).append(item.id)
            self._pending_appends.setdefault(path, []).append(item.id)

    def replace(self, items: list[MemoryItem]) -> None:
        """Store changed versions of existing items (the next `flush` rewrites their files atomically)."""
        for item in items:
            path = self._file_of.get(item.id)
            if path is None:
                raise KeyError(item.id)
            for index in self._indexes:
                index.remove(item.id)
            self._items[item.id] = item
            for index in self._indexes:
                index.add(item)
            self._pending_rewrites.add(path)

    def relocate(self, item: MemoryItem) -> None:
        """Move an existing item to the file its (changed) layer belongs in.

        `flush` appends to the new file before rewriting the old one, so a crash in between leaves
        the item twice with one id (the later file wins on load), never lost.
        """
        old_path = self._file_of[item.id]
        new_path = self.file_for(item)
        for index in self._indexes:
            index.remove(item.id)
        self._items[item.id] = item
        self._file_of[item.id] = new_path
        self._ids_in[old_path].remove(item.id)
        self._ids_of(new_path).append(item.id)
        self._pending_appends.setdefault(new_path, []).append(item.id)
        self._pending_rewrites.add(old_path)
        for index in self._indexes:
            index.add(item)

    def remove(self, item_ids: list[str]) -> list[MemoryItem]:
        """Delete items from memory and every index (the next `flush` rewrites their files atomically)."""
        removed: list[MemoryItem] = []
        for item_id in item_ids:
            item = self._items.get(item_id)
            path = self._file_of.get(item_id)
            if item is None or path is None:
                continue
            self._forget_in_memory(item_id)
            removed.append(item)
            self._pending_rewrites.add(path)
        return removed

    @property
    def dirty(self) -> bool:
        return bool(self._pending_appends or self._pending_rewrites)

    async def flush(self) -> None:
        """Write every pending change: appends first, then whole-file rewrites.

        Concurrent callers share the work (group commit): whoever flushes writes everything pending
        at that moment, and a caller whose changes were taken by a flush in progress returns when
        that flush is done. Each file's content is taken when the flush starts, so it is consistent.
        """
        async with self._flush_lock:
            appends, rewrites = self._pending_appends, self._pending_rewrites
            self._pending_appends, self._pending_rewrites = {}, set()
            # An append would cut off a hand-written last line that lacks its newline; a rewrite keeps it.
            rewrites |= self._unterminated & appends.keys()
            append_jobs = [
                (path, [dumps_line(self._items[i].to_json_dict()) for i in ids if i in self._items])
                for path, ids in appends.items()
                if path not in rewrites
            ]
            rewrite_jobs = [(path, self._file_bytes(path)) for path in rewrites]
            self._writing = set(appends) | rewrites
            try:
                for path, lines in append_jobs:
                    await append_lines(path, lines)
                    self._after_write(path)
                for path, data in rewrite_jobs:
                    await write_atomic(path, data)
                    self._after_write(path)
            except BaseException:
                # Not written: keep it pending so the next flush tries again.
                for path, ids in appends.items():
                    self._pending_appends.setdefault(path, [])[:0] = ids
                self._pending_rewrites |= rewrites
                raise
            finally:
                self._writing = set()

    def _file_bytes(self, path: Path) -> bytes:
        """The file's new text: its items and kept lines where they were, then the items added since."""
        ids = self._ids_in.get(path, [])
        present = set(ids)
        layout: list[str | KeptLine] = []
        placed: set[str] = set()  # a set, not `in layout`: semantic.jsonl may hold 100,000 items
        for entry in self._layout.get(path, []):
            if isinstance(entry, KeptLine):
                layout.append(entry)
            elif entry in present and entry not in placed:
                layout.append(entry)
                placed.add(entry)
        layout += [item_id for item_id in ids if item_id not in placed]
        self._layout[path] = layout
        return b"".join(
            # A kept line goes back byte for byte (undecodable bytes were read as surrogate escapes).
            (entry.text + "\n").encode("utf-8", "surrogateescape")
            if isinstance(entry, KeptLine)
            else (dumps_line(self._items[entry].to_json_dict()) + "\n").encode("utf-8", "backslashreplace")
            for entry in layout
        )

    @property
    def skipped_lines(self) -> int:
        """Lines of the item files that are not valid items (kept in their files, left out of memory)."""
        return sum(self._skipped.values())

    def _after_write(self, path: Path) -> None:
        self._unterminated.discard(path)  # the bot ends every line it writes
        signature = _signature(path)
        if signature is not None:
            self._signatures[path] = signature

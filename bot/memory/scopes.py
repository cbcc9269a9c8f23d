"""`MemoryScopes`: one `MemoryScope` per memory root, built on first use, and the reads of its files.

A memory root is the owner's memory, or the one a chat or a person has of its own (`bot.memory.audience`
says which a chat uses). Its scope holds the item store with the indexes that follow it, the daily notes
and MEMORY.md, and the lock that serialises its reads and writes. `fresh` is the one way to hold that
lock: it re-reads whatever changed on disk first, so a hand edit is seen by the next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from pathlib import PurePosixPath
from typing import Protocol, TypeVar

from bot.domain.memory import MemoryPack
from bot.heap import settle_after_load
from bot.memory.daily_notes import DailyNotes
from bot.memory.documents import DocumentsInDatabase, MemoryDocuments, MemoryFiles
from bot.memory.file_cache import TextFileCache
from bot.memory.item_storage import ItemStore
from bot.memory.items_store import MemoryItemStore
from bot.memory.legacy_context import NoteLines
from bot.memory.lexical_index import Bm25Index
from bot.memory.long_term import LongTermMemory
from bot.memory.long_term_pieces import LongTermIndex, LongTermUse
from bot.memory.paths import CHAT_SCOPES_DIR, USER_SCOPES_DIR
from bot.memory.retrieval import MemoryRetrievalService
from bot.memory.vector_cache import VectorCache, VectorStorage
from bot.memory.vector_index import VectorIndex
from bot.memory.write_service import MemoryWriteService
from bot.storage.durability import DeferredSync
from bot.storage.folder_changes import FolderChanges
from bot.workspace import MemoryPaths, Workspace

log = logging.getLogger(__name__)

T = TypeVar("T")

# Up to this many items a read of a scope runs on the event loop (see `MemoryScopes.off_loop_if_large`).
INLINE_WORK_MAX_ITEMS = 2000


class ItemsInDatabase(Protocol):
    """The items of every memory scope, and their vectors, kept in a database (`BOT_DATABASE_URL`)."""

    def store(self, scope: str, zone: tzinfo, changes: FolderChanges | None) -> ItemStore:
        """The items of `scope` (its folder under memory/; `changes` follows this process's own copy of them)."""
        ...

    @property
    def vectors(self) -> VectorStorage:
        """The vectors of every scope's items."""
        ...

    async def scopes(self) -> list[str]:
        """The scopes that have items there."""
        ...


@dataclass
class MemoryScope:
    """Everything one memory root needs at run time; `lock` serialises its reads and writes."""

    paths: MemoryPaths
    store: ItemStore
    lexical: Bm25Index
    vectors: VectorIndex
    retrieval: MemoryRetrievalService
    writer: MemoryWriteService
    notes: DailyNotes
    long_term: LongTermMemory
    vector_cache: VectorStorage
    note_lines: NoteLines = field(default_factory=NoteLines)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loaded: bool = False
    # When the last refresh from disk started (time.monotonic()).
    refreshed_at: float = -1.0
    # Items put in a prompt since the last decay pass, and when (persisted by `decay`).
    accessed: dict[str, datetime] = field(default_factory=dict)
    last_decay: date | None = None
    last_pack: MemoryPack | None = None
    # MEMORY.md's pieces, indexed once it outgrows its share (made again when it changes), and how much of it
    # the last prompt held.
    long_term_index: LongTermIndex | None = None
    long_term_use: LongTermUse | None = None


class MemoryScopes:
    """The scopes of one workspace, and memory's own thread for the reads done under a scope's lock."""

    def __init__(
        self,
        workspace: Workspace,
        zone: tzinfo,
        deferred: DeferredSync | None,
        documents_in_database: DocumentsInDatabase | None = None,
        items_in_database: ItemsInDatabase | None = None,
    ) -> None:
        """`documents_in_database`: MEMORY.md and the notes of each scope are kept there (None: in its files).
        `items_in_database`: the items of each scope and their vectors are kept there (None: in its files)."""
        self._workspace = workspace
        self._documents_in_database = documents_in_database
        self._items_in_database = items_in_database
        self._zone = zone
        self._deferred = deferred
        self._scopes: dict[MemoryPaths, MemoryScope] = {}
        # Memory's own worker thread, so the reads under a scope's lock never queue behind the fsyncs of
        # session writes in the shared default pool.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory")
        # And one for work that memory's thread hands on to run beside its own (`beside`).
        self._beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-beside")
        # One inotify instance for every scope's folders, items and notes (the kernel allows a user few instances).
        self._folder_changes = FolderChanges()

    def at(self, paths: MemoryPaths) -> MemoryScope:
        """The scope of the memory root `paths` (created on first use; `fresh` reads its files)."""
        scope = self._scopes.get(paths)
        if scope is None:
            store, vector_cache = self._items(paths)
            lexical, vectors = Bm25Index(), VectorIndex(store.get_many)
            store.subscribe(lexical)
            store.subscribe(vectors)
            documents = self._documents(paths)
            scope = MemoryScope(
                paths=paths,
                store=store,
                lexical=lexical,
                vectors=vectors,
                retrieval=MemoryRetrievalService(store, lexical, vectors, self._zone),
                writer=MemoryWriteService(store),
                notes=DailyNotes(documents),
                long_term=LongTermMemory(documents),
                vector_cache=vector_cache,
            )
            self._scopes[paths] = scope
        return scope

    def _items(self, paths: MemoryPaths) -> tuple[ItemStore, VectorStorage]:
        if self._items_in_database is not None:
            name = paths.root.relative_to(self._workspace.memory_dir).as_posix()
            return self._items_in_database.store(
                name, self._zone, self._folder_changes
            ), self._items_in_database.vectors
        store = MemoryItemStore(paths, self._zone, self._deferred, self._folder_changes)
        return store, VectorCache(paths.index_dir)

    def _documents(self, paths: MemoryPaths) -> MemoryDocuments:
        if self._documents_in_database is not None:
            return self._documents_in_database(paths.root.relative_to(self._workspace.memory_dir).as_posix())
        # One cache for the scope's folder (MEMORY.md and the notes), the one reader of its events.
        return MemoryFiles(paths, TextFileCache(self._folder_changes), self._deferred)

    def in_use(self) -> list[MemoryScope]:
        """The scopes built so far."""
        return list(self._scopes.values())

    def on_disk(self) -> list[MemoryScope]:
        """Every memory root in the workspace: the global one, each chat's and each person's (whatever the scope)."""
        roots = [self._workspace.memory_dir]
        for folder in (CHAT_SCOPES_DIR, USER_SCOPES_DIR):
            parent = self._workspace.memory_dir / folder
            roots += sorted(p for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
        return [self.at(MemoryPaths(root)) for root in roots]

    async def everywhere(self) -> list[MemoryScope]:
        """`on_disk`, and every scope whose items are in the database (a chat's may have no folder here)."""
        found = {id(scope): scope for scope in self.on_disk()}
        if self._items_in_database is not None:
            for name in await self._items_in_database.scopes():
                parts = PurePosixPath(name).parts
                if name.startswith("/") or ".." in parts:
                    continue  # a row that would put a scope outside memory/ (a hand edit) is not followed
                scope = self.at(MemoryPaths(self._workspace.memory_dir.joinpath(*parts)))
                found[id(scope)] = scope
        return list(found.values())

    async def off_loop_if_large(self, scope: MemoryScope, function: Callable[..., T], *args: object) -> T:
        """Run a read of the scope in memory's thread, or inline while the scope is small.

        Below `INLINE_WORK_MAX_ITEMS` the work (a few `stat`s, scoring a few hundred items) takes less
        than handing it to a thread does, and under load a hand-off waits for the GIL while the scope's
        lock is held, which serialises every chat behind it.
        """
        if len(scope.store) <= INLINE_WORK_MAX_ITEMS:
            return function(*args)
        return await self.in_thread(function, *args)

    def beside(self, function: Callable[..., T], *args: object) -> Future[T]:
        """Start `function(*args)` in a second thread, for memory's thread to wait for after work of its own
        (numpy work, which runs mostly without the GIL, side by side with other work)."""
        return self._beside.submit(function, *args)

    async def in_thread(self, function: Callable[..., T], *args: object) -> T:
        """Run `function` in memory's thread (work too long for the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(function, *args))

    @contextlib.asynccontextmanager
    async def fresh(self, scope: MemoryScope, requested: float | None = None) -> AsyncIterator[MemoryScope]:
        """Hold the scope's lock with its items re-read from any file that changed on disk.

        Waiters share refreshes: a refresh that started after this call was made (or after `requested`,
        when a message's work takes the lock twice) has seen the files as they are now, so it is not
        repeated. Hand edits and deletions are picked up on the next use.
        """
        requested = time.monotonic() if requested is None else requested
        async with scope.lock:
            await self._refresh(scope, requested)
            yield scope

    async def run_fresh(
        self, scope: MemoryScope, function: Callable[..., T], *args: object, requested: float | None = None
    ) -> T:
        """`function(*args)` run as `off_loop_if_large` runs it, in `fresh(scope, requested)`; once the scope is
        loaded, the re-read of changed files and `function` go to memory's thread in one hand-off (each
        hand-off waits for the event loop and the GIL, with the scope's lock held)."""
        requested = time.monotonic() if requested is None else requested
        async with scope.lock:
            if scope.loaded and scope.refreshed_at < requested:
                scope.refreshed_at = time.monotonic()
                await scope.store.refresh()
                return await self.off_loop_if_large(scope, _after, scope.store.refresh_sync, function, *args)
            await self._refresh(scope, requested)
            return await self.off_loop_if_large(scope, function, *args)

    async def _refresh(self, scope: MemoryScope, requested: float) -> None:
        """Re-read what changed on disk unless a refresh started after `requested` (the scope's lock is held)."""
        if scope.refreshed_at >= requested:
            return
        started = scope.refreshed_at = time.monotonic()
        await scope.store.refresh()
        if scope.loaded:
            await self.off_loop_if_large(scope, scope.store.refresh_sync)
            return
        await self.in_thread(scope.store.refresh_sync)  # the first load reads every file: never on the event loop
        scope.loaded = True
        settle_after_load()
        log.info(
            "[Memory] Loaded %d items from %s in %.0f ms",
            len(scope.store),
            scope.paths.items_dir,
            (time.monotonic() - started) * 1000,
        )

    async def let_go(self, paths: MemoryPaths) -> None:
        """Close the scope of `paths` and forget it, once its lock is free (its files are about to move); a
        later use builds it again from what is there then."""
        scope = self._scopes.get(paths)
        if scope is None:
            return
        async with scope.lock:
            if self._scopes.get(paths) is not scope:
                return
            del self._scopes[paths]
            await scope.vector_cache.close()
            await asyncio.to_thread(scope.store.close)

    async def close(self) -> None:
        """Close every scope's vector cache and item store, memory's thread and the folder watch."""
        for scope in self._scopes.values():
            await scope.vector_cache.close()
            await asyncio.to_thread(scope.store.close)
        self._executor.shutdown(wait=False)
        self._beside.shutdown(wait=False)
        self._folder_changes.close()


def _after(first: Callable[[], object], function: Callable[..., T], *args: object) -> T:
    """`first()`, then `function(*args)` (two steps of one hand-off to memory's thread)."""
    first()
    return function(*args)

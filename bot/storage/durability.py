"""`DeferredSync`: files written at once and made durable a moment later, many in one round of fsyncs.

What a write hands to `write` is in the kernel's page cache when the call returns: a crash of the
process loses none of it, only a crash of the machine (a power cut) could. A write whose loss in a power
cut costs nothing that cannot be had again need not hold up a turn for its own fsync:

- a session file rewritten after an append: it records how long the archive was, and the archive,
  written durably, gives back whatever an older file lacks;
- a daily-note line and a new memory item: derived from an exchange the archive holds (the items of
  turns no item refers to are made again before a compaction: `record_missing_turns`);
- a ledger *delivered* record: losing it means at worst one answer sent again after a power cut, the
  window the ledger already has between a send and its record.

Such writes `mark` their file (and the folder, when they created an entry in it). `sync` fsyncs every
marked file and folder once, in one hand-off to a worker thread: `run` does it within `interval`
seconds of a mark, and the application's stop does it last. A turn then makes two fsyncs of its own
(the ledger's *received* record, the archive append) instead of seven.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

SYNC_INTERVAL_SECONDS: Final = 1.0


class DeferredSync:
    """The files written without an fsync since the last `sync`, and the loop that makes them durable."""

    def __init__(self, interval: float = SYNC_INTERVAL_SECONDS) -> None:
        self._interval = interval
        # Marked from worker threads (the stores write there) and taken by `sync`'s thread.
        self._lock = threading.Lock()
        self._files: set[Path] = set()
        self._folders: set[Path] = set()
        self._round = asyncio.Lock()

    @property
    def pending(self) -> int:
        """How many files and folders wait for their fsync."""
        with self._lock:
            return len(self._files) + len(self._folders)

    def mark(self, path: Path, *, new_entry: bool = False) -> None:
        """`path` was written without an fsync; `new_entry`: its folder's entries changed too (a file
        created or renamed into place), so the folder is fsync'd as well."""
        with self._lock:
            self._files.add(path)
            if new_entry:
                self._folders.add(path.parent)

    async def sync(self) -> None:
        """Make every file marked so far durable (one hand-off for all of them). Rounds do not overlap:
        a caller that arrives during one waits for it, then syncs what was marked meanwhile."""
        async with self._round:
            if self.pending:
                await asyncio.to_thread(self._sync_now)

    def _sync_now(self) -> None:
        """`sync`, in the calling thread. A file that is gone (renamed over, deleted) is skipped: its
        replacement was marked in its turn. A failed fsync is logged; the data may not be on disk."""
        with self._lock:
            files, folders = self._files, self._folders
            self._files, self._folders = set(), set()
        # Files first, then the folders holding their names: a name made durable before its data could
        # name an empty file after a power cut.
        for path in [*sorted(files), *sorted(folders)]:
            try:
                descriptor = os.open(path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as error:
                log.error("[Storage] Could not open %s to make it durable: %s", path, error)
                continue
            try:
                os.fsync(descriptor)
            except OSError as error:
                log.error("[Storage] Could not make %s durable (fsync: %s)", path, error)
            finally:
                os.close(descriptor)

    async def run(self) -> None:
        """Sync every `interval` seconds while anything is marked, until cancelled (the stop syncs last)."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sync()
            except Exception:
                log.exception("[Storage] A round of deferred fsyncs failed")

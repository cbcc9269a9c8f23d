"""`FolderChanges`: which files of watched folders changed since a caller last asked, from the kernel's
inotify events, so that a store checks the few files named instead of every file it has.

The memory's item files are checked for hand edits before every message. Checking means one `stat` per
file, and there is a day file per day: the cost of a check grows every day, twice a message. With the events,
a check costs what changed: usually the one file the last turn appended to.

"Anything may have changed" (None: the caller checks every file, as without this) is the answer the
first time a folder is asked about (its watch starts then: nothing before it was seen), when a folder
cannot be watched (no inotify, not Linux, the watch limit reached, the folder missing), when events
were lost (the kernel's queue overflowed, the folder was deleted or moved), and when a folder was not
checked whole for `FULL_SCAN_SECONDS`: a network file system has no events for what another machine
writes, so such an edit is seen within that time rather than on the next message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

FULL_SCAN_SECONDS: Final = 30.0

try:  # Linux (and FreeBSD) only; elsewhere every check is a whole one
    from asyncinotify import InitFlags, Inotify, Mask

    # Not MODIFY: every write ends in a close (CLOSE_WRITE), and a turn's appends then make one event each
    # rather than two. A writer that keeps a file open is seen when it closes it or at the next whole check.
    _MASK: Any = (
        Mask.ATTRIB
        | Mask.CLOSE_WRITE
        | Mask.MOVED_FROM
        | Mask.MOVED_TO
        | Mask.CREATE
        | Mask.DELETE
        | Mask.DELETE_SELF
        | Mask.MOVE_SELF
        | Mask.ONLYDIR
    )
    _LOST: Any = Mask.Q_OVERFLOW | Mask.IGNORED | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.UNMOUNT
except (ImportError, OSError, RuntimeError, AttributeError):  # pragma: no cover - not Linux
    Inotify = None  # type: ignore[assignment,misc]


class FolderChanges:
    """The names changed in each watched folder since the last `changed` call for it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._inotify: Any = None
        self._unavailable = Inotify is None
        self._watches: dict[Path, Any] = {}
        self._pending: dict[Path, set[str]] = {}
        self._lost: set[Path] = set()
        self._checked_whole_at: dict[Path, float] = {}
        self._unwatchable: set[Path] = set()
        # Stores check from the event loop and from the memory's worker thread.
        self._lock = threading.Lock()

    def changed(self, *folders: Path) -> list[set[Path] | None]:
        """For each of `folders`, its files created, written, moved or deleted since the last call for it;
        None when that is not known (check them all). The events are read once for all of them."""
        with self._lock:
            self._drain()
            return [self._changed(folder) for folder in folders]

    def close(self) -> None:
        with self._lock:
            if self._inotify is not None:
                self._inotify.close()
                self._inotify = None
            self._watches.clear()

    def _changed(self, folder: Path) -> set[Path] | None:
        now = self._clock()
        if folder not in self._watches and not self._watch(folder):
            return None
        last_whole = self._checked_whole_at.get(folder)
        if folder in self._lost or last_whole is None or now - last_whole >= FULL_SCAN_SECONDS:
            self._lost.discard(folder)
            self._pending.pop(folder, None)
            self._checked_whole_at[folder] = now
            return None
        names = self._pending.pop(folder, None)
        return {folder / name for name in names} if names else set()

    def _watch(self, folder: Path) -> bool:
        if self._unavailable or folder in self._unwatchable:
            return False
        try:
            if self._inotify is None:
                self._inotify = Inotify(flags=InitFlags.CLOEXEC | InitFlags.NONBLOCK, cache_size=64, sync_timeout=0)
            self._watches[folder] = self._inotify.add_watch(folder, _MASK)
        except FileNotFoundError:
            return False  # not made yet: checked whole until it is
        except (OSError, RuntimeError) as error:
            # No inotify here, or the limit of instances or watches reached: checked whole, as before, and
            # not tried again (one log line, not one a message).
            log.info("[Files] Cannot watch %s for changes (%s); its files are checked one by one", folder, error)
            self._unavailable = self._inotify is None
            self._unwatchable.add(folder)
            return False
        self._checked_whole_at.pop(folder, None)
        return True

    def _drain(self) -> None:
        if self._inotify is None:
            return
        while (event := self._inotify.sync_get()) is not None:
            watch = event.watch
            folder = watch.path if watch is not None else None
            if event.mask & _LOST or folder is None:
                lost = self._watches if folder is None else {folder: None}
                for path in list(lost):
                    self._lost.add(path)
                    if event.mask & (Mask.IGNORED | Mask.DELETE_SELF | Mask.MOVE_SELF):
                        self._watches.pop(path, None)  # watched anew on the next call
                continue
            if event.name is not None:
                self._pending.setdefault(folder, set()).add(str(event.name))

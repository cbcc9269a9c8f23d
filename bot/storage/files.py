"""The one place that writes files: whole-file atomic rewrites and durable appends.

Every store (sessions, archive, memory, config) goes through these helpers so that a crash at any
moment leaves either the old or the new version of a file, never a half-written one. A write is
durable when the call returns, or, given a `DeferredSync`, by that one's next round. The waiting
(fsync) runs in a worker thread, never on the event loop. What they create is private to the bot's
user (folders 0700, files 0600), whatever the process umask.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.storage.durability import DeferredSync

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# What some editors write first in a UTF-8 file (JSON and Markdown readers read past it): no part of the text.
BYTE_ORDER_MARK = "\ufeff"

# (mtime in ns, size, inode): a file whose signature changed was edited or replaced, and is read again.
FileSignature = tuple[int, int, int]


def file_signature(path: Path) -> FileSignature | None:
    """The file's signature, or None when there is no such file (a folder on its path is not one either)."""
    try:
        stat = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def make_private_dirs(folder: Path) -> None:
    """Create `folder` and its missing parents, each 0700 (`mkdir(parents=True)` gives parents the umask's mode)."""
    missing: list[Path] = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, PRIVATE_FILE_MODE)


def write_atomic_sync(path: Path, data: bytes, deferred: DeferredSync | None = None) -> None:
    """Replace `path` with `data`: temp file in the same folder, fsync, rename, fsync the folder.

    With `deferred`, both fsyncs are left to its next round (the file is whole either way: the rename
    is atomic, and a crash of the process loses nothing the call wrote). The temp file is 0600
    (`mkstemp`), so the file is 0600 after its first rewrite whatever it was. A symlink to a file (MEMORY.md
    or runtime-config.json kept in a synced folder or a dotfiles repository) stays a link: its target is the
    file replaced; a dangling one is replaced by the file.
    """
    if path.is_symlink() and path.exists():
        path = path.resolve()
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except FileNotFoundError:  # its folder is missing (checked only then: rewrites are frequent)
        make_private_dirs(path.parent)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            if deferred is None:
                os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    if deferred is None:
        _fsync_dir(path.parent)
    else:
        deferred.mark(path, new_entry=True)


def put_aside_sync(path: Path) -> Path:
    """Move an unreadable file out of the way as `<name>.corrupt-<time>` (beside it), so that what is written
    next never replaces what a person may still want from it; returns the new path."""
    aside = path.with_name(f"{path.name}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}")
    path.rename(aside)
    return aside


def _fsync_dir(folder: Path) -> None:
    # The rename is only durable once the directory entry is on disk.
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temp_files(root: Path) -> int:
    """Delete temp files a crash left behind mid-`write_atomic`; the real files are whole either way."""
    stale = list(root.rglob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


async def write_atomic(path: Path, data: bytes, deferred: DeferredSync | None = None) -> None:
    """`write_atomic_sync`, its fsyncs in a worker thread; with `deferred` there are none to wait for, and
    the write (into the kernel's page cache) is made here."""
    if deferred is not None:
        write_atomic_sync(path, data, deferred)
        return
    await asyncio.to_thread(write_atomic_sync, path, data)


async def append_lines(path: Path, lines: list[str], deferred: DeferredSync | None = None) -> int:
    """Append whole lines durably (with `deferred`: made durable by its next round); a last line without
    its newline is ended first, or cut off when it is a torn JSONL record (`_end_last_line`). Returns
    the file's size after the append (with nothing to append, the file is not opened and 0 is returned).

    The lines are written here, into the kernel's page cache (tens of microseconds); only the fsync,
    which waits for the disk, goes to a worker thread. A thread that wrote too would take the GIL back
    after each of its system calls while the loop runs the turn, and that contention cost more CPU
    than the writing itself. The file is written through its descriptor (open, fstat, one byte read,
    write, close), not a buffered file object, whose set-up alone took eight more system calls: a
    turn appends to five files."""
    if not lines:
        return 0
    descriptor = _open_for_append(path)
    try:
        whole, had_line = _end_last_line(descriptor, path)
        data = b"".join(line_bytes(line) for line in lines)
        _write_all(descriptor, data)
        if deferred is None:
            # A descriptor of its own: a cancelled caller closes this one while the fsync may still run.
            await asyncio.to_thread(_fsync_and_close, os.dup(descriptor))
        else:
            # A file that held no ended line may be one a crash left before its folder's entry was durable.
            deferred.mark(path, new_entry=not had_line)
    finally:
        os.close(descriptor)
    return whole + len(data)


def _open_for_append(path: Path) -> int:
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, PRIVATE_FILE_MODE)
    except FileNotFoundError:  # its folder is missing (checked only then: appends are frequent)
        make_private_dirs(path.parent)
        return os.open(path, flags, PRIVATE_FILE_MODE)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _fsync_and_close(descriptor: int) -> None:
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def whole_lines_size_sync(path: Path) -> int:
    """The size of `path` once the next append has ended its last line or cut a torn record off: where
    that append will start (0 for no file)."""
    try:
        with open(path, "rb") as handle:
            end = os.fstat(handle.fileno()).st_size
            unended = _unended_line(handle.fileno(), end)
            if unended is None:
                return end
            start, tail = unended
            return end + 1 if _is_whole_line(tail, path) else start
    except FileNotFoundError:
        return 0


def read_lines_from_sync(path: Path, offset: int) -> str:
    """The text of `path` from the start of the line that holds byte `offset` (a line that began before
    `offset` is read whole), or "" when there is no file."""
    try:
        with open(path, "rb") as handle:
            handle.seek(_line_start_at(handle.fileno(), max(0, offset)))
            return handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def line_bytes(line: str) -> bytes:
    """The bytes `append_lines` writes for one line: UTF-8, one newline at its end."""
    # A lone surrogate (legal in JSON input, not in UTF-8) becomes a \uXXXX escape, which JSON reads back.
    return (line.rstrip("\n") + "\n").encode("utf-8", "backslashreplace")


def _end_last_line(descriptor: int, path: Path) -> tuple[int, bool]:
    """End a last line that has no newline, so the append starts a line of its own. Returns the size the
    append starts at, and whether the file held an ended line before.

    Such a line is either text a person saved without a final newline (many editors do), which is
    kept and ended, or the unfinished record of a JSONL append a crash cut short, which was never
    acknowledged: that one is cut off (and logged), so every later record stays readable."""
    end = os.fstat(descriptor).st_size
    unended = _unended_line(descriptor, end)
    if unended is None:
        return end, end > 0  # the usual case: the last append was whole
    start, tail = unended
    if _is_whole_line(tail, path):
        _write_all(descriptor, b"\n")
        return end + 1, start > 0
    log.warning("[Storage] Cut a torn last record (%d bytes) off %s before appending", len(tail), path)
    os.ftruncate(descriptor, start)
    return start, start > 0


def _unended_line(descriptor: int, end: int) -> tuple[int, bytes] | None:
    """Where the file's last line starts and its bytes, when that line has no newline (None otherwise,
    an empty file too); `end` is the file's size."""
    if end == 0 or os.pread(descriptor, 1, end - 1) == b"\n":
        return None
    start = _line_start_at(descriptor, end)
    return start, os.pread(descriptor, end - start, start)


def _is_whole_line(tail: bytes, path: Path) -> bool:
    """Whether an unterminated last line is whole: any line of a text file, a record that parses in JSONL."""
    if path.suffix != ".jsonl":
        return True
    try:
        json.loads(tail)
    except ValueError:  # a JSON error, or bytes that are not UTF-8
        return False
    return True


def _line_start_at(descriptor: int, position: int) -> int:
    """Where the line holding byte `position` starts: just after the last newline before it, or 0."""
    while position > 0:
        start = max(0, position - 4096)
        newline = os.pread(descriptor, position - start, start).rfind(b"\n")
        if newline != -1:
            return start + newline + 1
        position = start
    return 0


def append_text_sync(path: Path, text: str) -> None:
    """Append `text` exactly as given, durably (a file the model or a person writes, not a log)."""
    make_private_dirs(path.parent)
    with open(path, "ab", opener=_private_opener) as handle:
        handle.write(text.encode("utf-8", "backslashreplace"))
        handle.flush()
        os.fsync(handle.fileno())


async def append_text(path: Path, text: str) -> None:
    await asyncio.to_thread(append_text_sync, path, text)


def read_text_sync(path: Path) -> str | None:
    """The file's text, or None when it does not exist. Undecodable bytes are replaced, not fatal."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


async def read_text(path: Path) -> str | None:
    return await asyncio.to_thread(read_text_sync, path)


def read_state_sync(path: Path, stage: str, otherwise: str) -> dict[str, Any]:
    """A small state file's JSON object; empty when the file is missing, and when it cannot be read or is not
    a JSON object, with one log line under `stage` saying what follows (`otherwise`)."""
    try:
        text = read_text_sync(path)
    except OSError as error:
        log.warning("[%s] Could not read %s (%s): %s", stage, path, otherwise, error)
        return {}
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        log.warning("[%s] %s is not a JSON object (%s); it is rewritten at the next change", stage, path, otherwise)
        return {}
    return data

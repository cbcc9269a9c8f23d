"""The one place that writes files: whole-file atomic rewrites and durable appends.

Every store (sessions, archive, memory, config) goes through these helpers so that a crash at any
moment leaves either the old or the new version of a file, never a half-written one. The blocking
work runs in a worker thread, never on the event loop. What they create is private to the bot's user
(folders 0700, files 0600), whatever the process umask.
"""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

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


def write_atomic_sync(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: temp file in the same folder, fsync, rename, fsync the folder.

    The temp file is 0600 (`mkstemp`), so the file is 0600 after its first rewrite whatever it was.
    """
    make_private_dirs(path.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


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


async def write_atomic(path: Path, data: bytes) -> None:
    await asyncio.to_thread(write_atomic_sync, path, data)


def append_lines_sync(path: Path, lines: list[str]) -> None:
    """Append whole lines durably; a torn last line left by a crash is cut off first.

    A torn line is the unfinished tail of an append that never completed, so dropping it loses
    nothing that was ever acknowledged, and it keeps every later line parseable.
    """
    if not lines:
        return
    make_private_dirs(path.parent)
    payload = b"".join(line_bytes(line) for line in lines)
    with open(path, "a+b", opener=_private_opener) as handle:
        _cut_torn_tail(handle)
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


def line_bytes(line: str) -> bytes:
    """The bytes `append_lines` writes for one line: UTF-8, one newline at its end."""
    # A lone surrogate (legal in JSON input, not in UTF-8) becomes a \uXXXX escape, which JSON reads back.
    return (line.rstrip("\n") + "\n").encode("utf-8", "backslashreplace")


def _cut_torn_tail(handle: io.BufferedRandom) -> None:
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return
    handle.seek(end - 1)
    if handle.read(1) == b"\n":
        return
    # Walk back in blocks to the last newline; everything after it is the torn fragment.
    position = end
    block = 4096
    while position > 0:
        start = max(0, position - block)
        handle.seek(start)
        chunk = handle.read(position - start)
        newline = chunk.rfind(b"\n")
        if newline != -1:
            handle.truncate(start + newline + 1)
            handle.seek(0, os.SEEK_END)
            return
        position = start
    handle.truncate(0)
    handle.seek(0)


async def append_lines(path: Path, lines: list[str]) -> None:
    await asyncio.to_thread(append_lines_sync, path, lines)


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

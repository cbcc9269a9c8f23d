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


def append_lines_sync(path: Path, lines: list[str]) -> int:
    """Append whole lines durably; a torn last line left by a crash is cut off first. Returns the file's
    size after the append (with nothing to append, the file is not opened and 0 is returned).

    A torn line is the unfinished tail of an append that never completed, so dropping it loses
    nothing that was ever acknowledged, and it keeps every later line parseable.
    """
    if not lines:
        return 0
    make_private_dirs(path.parent)
    payload = b"".join(line_bytes(line) for line in lines)
    with open(path, "a+b", opener=_private_opener) as handle:
        _cut_torn_tail(handle)
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
        return handle.tell()


def whole_lines_size_sync(path: Path) -> int:
    """The size of `path` up to the end of its last whole line: what it will be once the next append has
    cut a torn tail off (0 for no file)."""
    try:
        with open(path, "rb") as handle:
            return _line_start_at(handle, handle.seek(0, os.SEEK_END))
    except FileNotFoundError:
        return 0


def read_lines_from_sync(path: Path, offset: int) -> str:
    """The text of `path` from the start of the line that holds byte `offset` (a line that began before
    `offset` is read whole), or "" when there is no file."""
    try:
        with open(path, "rb") as handle:
            handle.seek(_line_start_at(handle, max(0, offset)))
            return handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def line_bytes(line: str) -> bytes:
    """The bytes `append_lines` writes for one line: UTF-8, one newline at its end."""
    # A lone surrogate (legal in JSON input, not in UTF-8) becomes a \uXXXX escape, which JSON reads back.
    return (line.rstrip("\n") + "\n").encode("utf-8", "backslashreplace")


def _cut_torn_tail(handle: io.BufferedRandom) -> None:
    """Cut off a torn last line: the unfinished fragment of an append a crash interrupted."""
    end = handle.seek(0, os.SEEK_END)
    whole = _line_start_at(handle, end)
    if whole != end:
        handle.truncate(whole)
        handle.seek(0, os.SEEK_END)


def _line_start_at(handle: io.BufferedIOBase, position: int) -> int:
    """Where the line holding byte `position` starts: just after the last newline before it, or 0."""
    while position > 0:
        start = max(0, position - 4096)
        handle.seek(start)
        newline = handle.read(position - start).rfind(b"\n")
        if newline != -1:
            return start + newline + 1
        position = start
    return 0


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

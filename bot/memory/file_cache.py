"""`TextFileCache`: a file's text, re-read only when the file changed (size, mtime or inode).

MEMORY.md and the daily notes are read for every message; most of the time they have not changed,
and a read through the shared worker threads can wait behind other stores' fsyncs under load. The
check is one `stat` (microseconds, done inline); the read, when needed, runs in a thread. A change
is always seen: the cache is keyed by the file's signature, so nothing stale survives an edit.
What the bot appends itself (today's note, after every exchange) extends the cached text instead of
making the next message read the whole file again.

Given the process's `FolderChanges`, a file is not even `stat`ed while its folder's events name no change
to it (a message reads MEMORY.md and eight days of notes, most of them files that do not exist); it is
checked as above when they do, or when they are not known. A symlink (MEMORY.md kept in a synced folder)
is checked on every read: an edit of its target is an event of another folder.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from bot.storage.files import FileSignature, file_signature, read_text_sync
from bot.storage.folder_changes import FolderChanges

# A file found missing: cached too, so that a week of days without notes is not looked for every message.
_MISSING: tuple[None, None] = (None, None)


class TextFileCache:
    """Texts of files by path, each valid for one signature of its file."""

    def __init__(self, changes: FolderChanges | None = None) -> None:
        """`changes`: the folders' events, read by this cache alone for the folders of the files it reads."""
        self._entries: dict[Path, tuple[FileSignature, str] | tuple[None, None]] = {}
        self._changes = changes
        # Files the events named since they were last checked.
        self._named: set[Path] = set()
        # Files found to be symlinks when read: their folder's events do not tell of a change to their target.
        self._linked: set[Path] = set()

    async def read(self, path: Path) -> str | None:
        """The file's text, or None when it does not exist (raises OSError when it cannot be read)."""
        self._take_events(path.parent)
        return await self._read(path)

    async def read_all(self, paths: list[Path]) -> list[str | OSError | None]:
        """`read` of each of `paths` (an unreadable one's error in its place), the events read once for all."""
        self._take_events(*dict.fromkeys(path.parent for path in paths))
        texts: list[str | OSError | None] = []
        for path in paths:
            try:
                texts.append(await self._read(path))
            except OSError as error:
                texts.append(error)
        return texts

    async def _read(self, path: Path) -> str | None:
        cached = self._entries.get(path)
        if cached is not None and self._changes is not None and path not in self._named and path not in self._linked:
            return cached[1]
        self._named.discard(path)
        signature = file_signature(path)
        if signature is None:
            self._entries[path] = _MISSING
            return None
        if cached is not None and cached[0] == signature:
            return cached[1]
        text, linked = await asyncio.to_thread(_read_and_look, path)
        if linked:
            self._linked.add(path)
        else:
            self._linked.discard(path)
        if text is None:
            self._entries[path] = _MISSING
            return None
        self._entries[path] = (signature, text)
        return text

    def appended(self, path: Path, before: FileSignature | None, added: bytes) -> None:
        """`added` was just appended to `path`, whose signature was `before`: the cached text grows by it
        when the cache held the file as it was then and the file grew by exactly that (no other writer,
        no torn tail cut); otherwise the entry goes and the next read reads the file."""
        cached = self._entries.pop(path, None)
        after = file_signature(path)
        if cached is None or cached[0] is None or before is None or cached[0] != before or after is None:
            return
        if after[1] == before[1] + len(added) and after[2] == before[2]:
            self._entries[path] = (after, cached[1] + added.decode("utf-8", errors="replace"))

    def _take_events(self, *folders: Path) -> None:
        """Add the files the folders' events name to those to check (every file of a folder whose events are
        not known: watched from now, or a whole check due)."""
        if self._changes is None:
            return
        for folder, named in zip(folders, self._changes.changed(*folders), strict=True):
            if named is None:
                self._named.update(known for known in self._entries if known.parent == folder)
            else:
                self._named |= named


def _read_and_look(path: Path) -> tuple[str | None, bool]:
    """The file's text (None when it is missing), and whether `path` is a symlink (one `lstat` more, per read)."""
    return read_text_sync(path), os.path.islink(path)

"""The record of the documents sent in chats (`Upload`): what each is, its parts, how far reading it got.

`UploadRecords` is what `DocumentReader` asks of it. `UploadFile` keeps it in `workspace/rag/uploads.jsonl`,
one process's; `bot.rag.upload_table.UploadTable` in PostgreSQL, shared by every process of the database.
An upload is keyed by its chat and its id (the hash of the file's bytes): the same file sent again to a
chat finds its record. A reading in progress is watched by one process: the one that recorded it, or the
one that took it over (`adopt`) when that one stopped or died.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bot.storage.files import read_text_sync, write_atomic
from bot.storage.jsonl import dumps_line, parse_numbered

log = logging.getLogger(__name__)

READING, DONE, INCOMPLETE, FORGOTTEN = "reading", "done", "incomplete", "forgotten"


@dataclass
class Upload:
    """One document sent in a chat, and how far reading it got."""

    id: str
    name: str
    session_id: str
    channel_type: str
    chat_id: str
    parts: list[str]
    created_at: str
    progress_message_id: str | None = None
    status: str = READING
    problems: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.session_id, self.id

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Upload:
        """An upload from its JSON line; `TypeError` or `ValueError` when the line is not one."""
        upload = cls(**record)
        texts = [upload.id, upload.name, upload.session_id, upload.channel_type, upload.chat_id, upload.created_at]
        if not isinstance(upload.parts, list) or not isinstance(upload.problems, list):
            raise ValueError("parts and problems are lists")
        if not all(isinstance(text, str) for text in [*texts, *upload.parts, *upload.problems]):
            raise ValueError("a field of text holds something else")
        if not isinstance(upload.progress_message_id, str | None):
            raise ValueError("progress_message_id is not text")
        if upload.status not in (READING, DONE, INCOMPLETE, FORGOTTEN):
            raise ValueError(f"unknown status {upload.status!r}")
        return upload


class UploadClaim(Protocol):
    """The key of an upload, held by this process while its document is queued (`UploadRecords.claim`)."""

    @property
    def known(self) -> Upload | None:
        """The upload the key holds already (not forgotten): then there is nothing to read."""
        ...

    async def keep(self, upload: Upload) -> None:
        """Record the new upload under the held key, for this process to watch."""
        ...


class UploadRecords(Protocol):
    """Uploads by chat and id. A failed write or read raises `OSError`."""

    def claim(self, upload: Upload) -> AbstractAsyncContextManager[UploadClaim]:
        """Hold the key of `upload` (its chat and id) for the block: another claim of the same key, in any
        process, waits until the block ends, then finds what it kept. A block that raises keeps nothing."""
        ...

    async def get(self, session_id: str, upload_id: str) -> Upload | None:
        """The upload, unless it is forgotten."""
        ...

    async def listed(self, session_id: str) -> list[Upload]:
        """The chat's uploads not forgotten, in the order they came."""
        ...

    async def settle(self, upload: Upload) -> bool:
        """Record how the reading of `upload` ended (its `status` and `problems`), if it is still being read
        and watched by this process; whether it was."""
        ...

    async def forget(self, session_id: str, upload_id: str) -> Upload | None:
        """Mark the upload forgotten; the upload, or None when the chat has no such upload."""
        ...

    async def adopt(self, channel_types: set[str]) -> list[Upload]:
        """The uploads being read, sent through one of `channel_types`, whose watching process is gone
        (stopped or died), now this process's to watch: each taken by one process."""
        ...

    async def move_chat(self, old_session_id: str, new_session_id: str, new_chat_id: str) -> int:
        """Record the uploads of the chat `old_session_id` as the chat's under its new id; how many. One the new
        chat has too (the same file sent there) stays under the old id."""
        ...


class UploadFile:
    """The uploads as `workspace/rag/uploads.jsonl`, one line each, rewritten whole (atomically) at every
    change; a line that is not an upload is logged, left out and written back as it was."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._uploads: dict[tuple[str, str], Upload] | None = None
        self._kept_lines: list[str] = []
        self._lock = asyncio.Lock()
        self._load_lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def claim(self, upload: Upload) -> AsyncIterator[UploadClaim]:
        async with self._lock:  # this process is the file's only one: its lock holds every key
            known = (await self._loaded()).get(upload.key)
            yield _FileClaim(self, known if known is not None and known.status != FORGOTTEN else None)

    async def get(self, session_id: str, upload_id: str) -> Upload | None:
        upload = (await self._loaded()).get((session_id, upload_id))
        return upload if upload is not None and upload.status != FORGOTTEN else None

    async def listed(self, session_id: str) -> list[Upload]:
        uploads = (await self._loaded()).values()
        return [upload for upload in uploads if upload.session_id == session_id and upload.status != FORGOTTEN]

    async def settle(self, upload: Upload) -> bool:
        async with self._lock:
            uploads = await self._loaded()
            current = uploads.get(upload.key)
            if current is None or current.status != READING:
                return False
            current.status, current.problems = upload.status, list(upload.problems)
            await self._save()
            return True

    async def forget(self, session_id: str, upload_id: str) -> Upload | None:
        async with self._lock:
            upload = (await self._loaded()).get((session_id, upload_id))
            if upload is None or upload.status == FORGOTTEN:
                return None
            upload.status = FORGOTTEN
            await self._save()
            return upload

    async def adopt(self, channel_types: set[str]) -> list[Upload]:
        # No other process reads this file: every reading is this one's to watch.
        uploads = (await self._loaded()).values()
        return [upload for upload in uploads if upload.status == READING and upload.channel_type in channel_types]

    async def move_chat(self, old_session_id: str, new_session_id: str, new_chat_id: str) -> int:
        async with self._lock:
            uploads = await self._loaded()
            moved = [
                upload for key, upload in uploads.items()
                if key[0] == old_session_id and (new_session_id, upload.id) not in uploads
            ]  # fmt: skip
            for upload in moved:
                del uploads[upload.key]
                upload.session_id, upload.chat_id = new_session_id, new_chat_id
                uploads[upload.key] = upload
            if moved:
                await self._save()
            return len(moved)

    async def _loaded(self) -> dict[tuple[str, str], Upload]:
        async with self._load_lock:  # one read, however many ask at once (a document may come during `adopt`)
            if self._uploads is None:
                text = await asyncio.to_thread(read_text_sync, self._path)
                parsed = parse_numbered(text or "", self._path, Upload.from_json, "an upload")
                self._kept_lines = [line for _, line in parsed.skipped]
                self._uploads = {upload.key: upload for upload in parsed.records}
            return self._uploads

    async def _put(self, upload: Upload) -> None:
        (await self._loaded())[upload.key] = upload
        await self._save()

    async def _save(self) -> None:
        assert self._uploads is not None
        lines = [dumps_line(upload.to_json()) for upload in self._uploads.values()] + self._kept_lines
        await write_atomic(self._path, "".join(line + "\n" for line in lines).encode("utf-8", "backslashreplace"))


@dataclass
class _FileClaim:
    _file: UploadFile
    known: Upload | None

    async def keep(self, upload: Upload) -> None:
        await self._file._put(upload)

"""`DocumentReader`: a file sent in a chat, read into the chat's knowledge graph in the background.

A document is fetched through its channel, its text read (`reading`), and its parts queued on the RAG
queue, each as a document of its own (`file_{hash}_{part}`), indexed by the scheduler's next tick.
The user sees one progress message, edited in place ("Reading report.pdf: 3 of 12 parts"), then a
final line. Uploads are recorded in `rag/uploads.jsonl` (rewritten atomically): a restart in the
middle resumes watching the parts, which the durable queue kept; the same file sent twice is read
once. `/docs` lists what was read, `/docs forget ID` removes a document from the graph.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bot.channels.base import Channel, FileUnavailable
from bot.clock import Clock
from bot.domain.inbound import InboundMessage
from bot.rag.reading import MAX_DOWNLOAD_BYTES, READABLE, UnreadableDocument, document_text, kind_of, parts_of
from bot.rag.service import RagService
from bot.settings import RuntimeConfig
from bot.storage.files import write_atomic
from bot.storage.jsonl import read_jsonl_sync

log = logging.getLogger(__name__)

UPLOADS_FILE = "uploads.jsonl"
WATCH_SECONDS = 0.5
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


class DocumentReader:
    """Documents sent in chats: read, queued for the knowledge graph, progress shown, listed, forgotten."""

    def __init__(self, rag: RagService, folder: Path, config: Callable[[], RuntimeConfig], clock: Clock) -> None:
        self._rag = rag
        self._path = folder / UPLOADS_FILE
        self._config = config
        self._clock = clock
        self._uploads: dict[str, Upload] | None = None
        self._lock = asyncio.Lock()
        self._watchers: dict[str, asyncio.Task[None]] = {}

    # -- a document arrives ---------------------------------------------------------------------------

    async def accept(self, inbound: InboundMessage, channel: Channel) -> None:
        """Read the document attached to `inbound` into the chat's graph; answers every case."""
        document = inbound.attachment
        if document is None or document.kind != "document":
            return
        name, size, mime = document.name or "document", document.size_bytes, document.mime
        if not self._config().rag.enabled:
            await channel.send_text(inbound.chat_id, f"I can't keep {name}: the knowledge graph is turned off.")
            return
        if size > MAX_DOWNLOAD_BYTES:
            megabytes = size / 1024 / 1024
            reply = f"{name} is {megabytes:.0f} MB: Telegram lets bots download files of at most 20 MB."
            await channel.send_text(inbound.chat_id, reply)
            return
        if kind_of(name, mime) is None:
            await channel.send_text(inbound.chat_id, f"I can't read {name}: I can read {READABLE}.")
            return
        try:
            data = await channel.download(document.file_id)
            if len(data) > MAX_DOWNLOAD_BYTES:
                raise FileUnavailable("Telegram lets bots download files of at most 20 MB")
            text = await asyncio.to_thread(document_text, name, mime, data)
        except FileUnavailable as error:
            log.warning("[RAG] Could not fetch %s from %s: %s", name, inbound.session_id, error)
            await channel.send_text(inbound.chat_id, f"I couldn't get {name}: {error}.")
            return
        except UnreadableDocument as error:
            log.info("[RAG] Could not read %s from %s: %s", name, inbound.session_id, error)
            await channel.send_text(inbound.chat_id, f"{error}.")
            return
        upload_id = "file_" + hashlib.sha256(data).hexdigest()[:12]
        async with self._lock:
            uploads = await self._loaded()
            known = uploads.get(upload_id)
            if known is not None and known.status != FORGOTTEN and known.session_id == inbound.session_id:
                await channel.send_text(
                    inbound.chat_id,
                    f"I have read {known.name} already ({plural(len(known.parts), 'part')}, id {known.id}).",
                )
                return
            parts = parts_of(text)
            at = self._clock.now()
            upload = Upload(
                upload_id, name, inbound.session_id, inbound.channel_type, inbound.chat_id, [], at.isoformat()
            )
            # Queued before the upload is recorded: a crash in between leaves parts that are indexed
            # anyway, and the same file sent again finds them queued (never twice).
            for number, part in enumerate(parts, start=1):
                header = f"Document {name} (sent in chat {inbound.session_id}), part {number} of {len(parts)}:"
                doc = await self._rag.enqueue_part(
                    self._config(), inbound.session_id, f"{upload_id}_{number:03d}", f"{header}\n{part}", at
                )
                upload.parts.append(doc.id)
            upload.progress_message_id = await channel.send_text(inbound.chat_id, self._progress(upload, 0))
            uploads[upload_id] = upload
            await self._save()
        log.info("[RAG] Reading %s (%s, %d chars) in %d parts for %s", name, upload_id, len(text), len(parts),
                 inbound.session_id)  # fmt: skip
        self._watch(upload, channel)

    def resume(self, channels: dict[str, Channel]) -> None:
        """At start: go on watching documents whose reading a stop interrupted (their parts are queued)."""
        uploads = self._uploads if self._uploads is not None else self._load_sync()
        for upload in uploads.values():
            channel = channels.get(upload.channel_type)
            if upload.status == READING and channel is not None:
                log.info("[RAG] Resuming the reading of %s for %s", upload.name, upload.session_id)
                self._watch(upload, channel)

    # -- progress -------------------------------------------------------------------------------------

    def _watch(self, upload: Upload, channel: Channel) -> None:
        if upload.id not in self._watchers or self._watchers[upload.id].done():
            self._watchers[upload.id] = asyncio.get_running_loop().create_task(
                self._follow(upload, channel), name=f"reading {upload.id}"
            )

    async def _follow(self, upload: Upload, channel: Channel) -> None:
        shown = 0  # the progress message starts at "0 of N"
        while upload.status == READING:
            statuses = [
                doc.status if (doc := await self._rag.store.get(part)) else "forgotten" for part in upload.parts
            ]
            indexed = statuses.count("indexed")
            settled = all(status != "queued" for status in statuses)
            if settled:
                upload.status = DONE if indexed == len(statuses) else INCOMPLETE
                if upload.status == INCOMPLETE:
                    upload.problems = [f"{len(statuses) - indexed} of {len(statuses)} parts could not be indexed"]
                async with self._lock:
                    await self._save()
            if indexed != shown or settled:
                shown = indexed
                await self._show(upload, channel, self._progress(upload, indexed))
            if not settled:
                await asyncio.sleep(WATCH_SECONDS)

    def _progress(self, upload: Upload, indexed: int) -> str:
        total = len(upload.parts)
        if upload.status == DONE:
            return f"Read {upload.name}: {plural(total, 'part')}, in my memory now (id {upload.id}). Ask me about it."
        if upload.status == INCOMPLETE:
            return f"Read {upload.name} only in part: {'; '.join(upload.problems)}. /docs shows what I have."
        return f"Reading {upload.name}: {indexed} of {plural(total, 'part')}"

    async def _show(self, upload: Upload, channel: Channel, text: str) -> None:
        try:
            if upload.progress_message_id is not None:
                await channel.edit_text(upload.chat_id, upload.progress_message_id, text)
            else:
                upload.progress_message_id = await channel.send_text(upload.chat_id, text)
        except Exception as error:  # progress is a courtesy: reading goes on whatever the chat app says
            log.warning("[RAG] Could not show the progress of %s: %s", upload.name, error)

    # -- /docs ------------------------------------------------------------------------------------------

    async def listed(self, session_id: str) -> list[Upload]:
        async with self._lock:
            uploads = await self._loaded()
            return [u for u in uploads.values() if u.session_id == session_id and u.status != FORGOTTEN]

    async def reading(self) -> int:
        """Documents being read now (for `/status`)."""
        async with self._lock:
            return sum(1 for upload in (await self._loaded()).values() if upload.status == READING)

    async def forget(self, session_id: str, upload_id: str) -> Upload | None:
        async with self._lock:
            upload = (await self._loaded()).get(upload_id)
            if upload is None or upload.session_id != session_id or upload.status == FORGOTTEN:
                return None
            upload.status = FORGOTTEN
            await self._save()
        watcher = self._watchers.pop(upload_id, None)
        if watcher is not None:
            watcher.cancel()
        await self._rag.forget_documents(upload.parts)
        log.info("[RAG] Forgot the document %s (%s)", upload.name, upload.id)
        return upload

    async def close(self) -> None:
        for watcher in self._watchers.values():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._watchers.clear()

    # -- the record ---------------------------------------------------------------------------------------

    async def _loaded(self) -> dict[str, Upload]:
        if self._uploads is None:
            self._uploads = await asyncio.to_thread(self._load_sync)
        return self._uploads

    def _load_sync(self) -> dict[str, Upload]:
        uploads: dict[str, Upload] = {}
        for record in read_jsonl_sync(self._path):
            try:
                upload = Upload(**record)
            except TypeError as error:
                log.warning("[RAG] Skipped an unreadable line of %s: %s", self._path, error)
                continue
            uploads[upload.id] = upload
        self._uploads = uploads
        return uploads

    async def _save(self) -> None:
        assert self._uploads is not None
        lines = [json.dumps(asdict(upload), ensure_ascii=False) for upload in self._uploads.values()]
        self._path.parent.mkdir(parents=True, exist_ok=True)
        await write_atomic(self._path, "".join(line + "\n" for line in lines).encode("utf-8"))


def describe(uploads: list[Upload]) -> str:
    """`/docs`: the documents read in this chat."""
    if not uploads:
        return "I have not read any document in this chat. Send me a PDF, text or Markdown file."
    lines = ["Documents I have read here:"]
    for upload in uploads:
        state = {DONE: "read", READING: "reading", INCOMPLETE: "read in part"}.get(upload.status, upload.status)
        lines.append(f"{upload.id} · {upload.name} · {plural(len(upload.parts), 'part')} · {state}")
    lines.append("Remove one with /docs forget ID.")
    return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

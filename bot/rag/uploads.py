"""`DocumentReader`: a file sent in a chat, read into the chat's knowledge graph in the background.

A document is fetched through its channel, its text read (`reading`), and its parts queued on the RAG
queue, each as a document of its own (`file_{hash}_{part}`), indexed by the scheduler's next tick.
The user sees one progress message, edited in place ("Reading report.pdf: 3 of 12 parts"), then a
final line. Uploads are recorded in `UploadRecords` (`rag/uploads.jsonl`, or with `BOT_DATABASE_URL` the
table `rag_uploads` every replica shares): a stop in the middle (or, with replicas, the death of the one
reading) leaves the reading to be watched on (its parts are on the durable queue) by the next start or by
another replica; the same file sent twice to a chat is read once. `/docs` lists what was read,
`/docs forget ID` removes a document from the graph.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from bot.channels.base import Channel, FileUnavailable
from bot.clock import Clock
from bot.domain.inbound import InboundMessage
from bot.rag.reading import MAX_DOWNLOAD_BYTES, READABLE, UnreadableDocument, document_text, kind_of, parts_of
from bot.rag.service import RagService
from bot.rag.upload_records import DONE, INCOMPLETE, READING, Upload, UploadRecords
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

WATCH_SECONDS = 0.5


class DocumentReader:
    """Documents sent in chats: read, queued for the knowledge graph, progress shown, listed, forgotten."""

    def __init__(
        self, rag: RagService, records: UploadRecords, config: Callable[[], RuntimeConfig], clock: Clock
    ) -> None:
        self._rag = rag
        self._records = records
        self._config = config
        self._clock = clock
        self._channels: dict[str, Channel] = {}
        self._watchers: dict[tuple[str, str], asyncio.Task[None]] = {}

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
        at = self._clock.now()
        upload = Upload(upload_id, name, inbound.session_id, inbound.channel_type, inbound.chat_id, [], at.isoformat())
        try:
            read = await self._queue(upload, parts_of(text), at, channel)
        except OSError as error:  # the record refused: whatever was queued is indexed, and found if sent again
            log.error("[RAG] Could not record the reading of %s for %s: %s", name, inbound.session_id, error)
            await channel.send_text(inbound.chat_id, f"I couldn't keep {name}: my storage failed. Send it again later.")
            return
        if read:
            log.info("[RAG] Reading %s (%s, %d chars) in %d parts for %s", name, upload_id, len(text),
                     len(upload.parts), inbound.session_id)  # fmt: skip
            self._watch(upload, channel)

    async def _queue(self, upload: Upload, parts: list[str], at: datetime, channel: Channel) -> bool:
        """Queue the parts of a new upload and record it, with its progress message; False (and the chat
        told) when the chat has it already."""
        async with self._records.claim(upload) as claim:
            known = claim.known
            if known is not None:
                done = "am reading" if known.status == READING else "have read"
                reply = f"I {done} {known.name} already ({plural(len(known.parts), 'part')}, id {known.id})."
                await channel.send_text(upload.chat_id, reply)
                return False
            # Queued before the upload is recorded: a crash in between leaves parts that are indexed
            # anyway, and the same file sent again finds them queued (never twice).
            for number, part in enumerate(parts, start=1):
                header = f"Document {upload.name} (sent in chat {upload.session_id}), part {number} of {len(parts)}:"
                doc = await self._rag.enqueue_part(
                    self._config(), upload.session_id, f"{upload.id}_{number:03d}", f"{header}\n{part}", at
                )
                upload.parts.append(doc.id)
            upload.progress_message_id = await channel.send_text(upload.chat_id, self._progress(upload, 0))
            await claim.keep(upload)
            return True

    async def resume(self, channels: dict[str, Channel]) -> None:
        """At start: go on watching the readings a stop interrupted (their parts are queued), and with a
        shared record those another process left when it stopped or died; `adopt` does it again later."""
        self._channels = channels
        await self.adopt()

    async def adopt(self) -> list[Upload]:
        """Watch the readings whose process is gone (stopped or died), taken over from the record; returns them."""
        adopted = await self._records.adopt(set(self._channels))
        if adopted:
            self._rag.index_soon()  # its parts may be queued by the process that is gone
        for upload in adopted:
            log.info("[RAG] Resuming the reading of %s for %s", upload.name, upload.session_id)
            self._watch(upload, self._channels[upload.channel_type])
        return adopted

    # -- progress -------------------------------------------------------------------------------------

    def _watch(self, upload: Upload, channel: Channel) -> None:
        watcher = self._watchers.get(upload.key)
        if watcher is None or watcher.done():
            self._watchers[upload.key] = asyncio.get_running_loop().create_task(
                self._follow(upload, channel), name=f"reading {upload.id}"
            )

    async def _follow(self, upload: Upload, channel: Channel) -> None:
        shown = 0  # the progress message starts at "0 of N"
        failing = False
        while True:
            try:
                # Read again each time: another replica may have forgotten it.
                current = await self._records.get(*upload.key)
                if current is None or current.status != READING:
                    return
                upload = current
                known = await self._rag.store.statuses(upload.parts)
                statuses = [known.get(part, "forgotten") for part in upload.parts]
                indexed = statuses.count("indexed")
                settled = all(status != "queued" for status in statuses)
                if settled:
                    missing = len(statuses) - indexed
                    problems = [f"{missing} of {len(statuses)} parts could not be indexed"] if missing else []
                    upload = replace(upload, status=INCOMPLETE if missing else DONE, problems=problems)
                    if not await self._records.settle(upload):
                        return  # forgotten meanwhile
                if indexed != shown or settled:
                    shown = indexed
                    await self._show(upload, channel, self._progress(upload, indexed))
                if settled:
                    return
                failing = False
            except OSError as error:  # the record or the queue out of reach: asked again on the next round
                if not failing:
                    log.warning("[RAG] Could not follow the reading of %s (trying again): %s", upload.name, error)
                failing = True
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
        return await self._records.listed(session_id)

    async def forget(self, session_id: str, upload_id: str) -> Upload | None:
        upload = await self._records.forget(session_id, upload_id)
        if upload is None:
            return None
        watcher = self._watchers.pop(upload.key, None)
        if watcher is not None:
            watcher.cancel()
        await self._rag.forget_documents(upload.parts)
        log.info("[RAG] Forgot the document %s (%s)", upload.name, upload.id)
        return upload

    async def move_chat(self, old_session_id: str, new_session_id: str, new_chat_id: str) -> str:
        """The chat `old_session_id` lives on as `new_chat_id` (a group upgraded to a supergroup): its documents
        (`/docs`) and what its exchanges and documents put in the knowledge graph are the new chat's, read by its
        retrievals where they are (`RagService.move_chat`); what was moved, for the log."""
        uploads = await self._records.move_chat(old_session_id, new_session_id, new_chat_id)
        documents = await self._rag.move_chat(old_session_id, new_session_id)
        return f"documents: {uploads}, graph entries: {documents}"

    async def close(self) -> None:
        for watcher in self._watchers.values():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._watchers.clear()


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

"""`Inbox`: a write-ahead journal of admitted messages, so none is lost between arrival and its turn.

A message is recorded (durably) before it joins its chat's queue and marked done as soon as its reply
went out (or its handling ended without one). A crash while it waits behind a long run, or in the middle
of its own, leaves it pending, and the next start hands the pending ones back to their chats in order.
The message's journal id becomes the id of its user message in the session, so a replay knows whether it
was already stored, and answered (then only the stored answer is sent again). The file holds
only what is not yet handled, and the dedup keys of the newest messages: it is rewritten, atomically,
when read at start.

A channel may deliver a message again after a crash (Telegram redelivers what was not acknowledged). The
journal read at start remembers the channel's dedup keys of everything it held, so a message journaled
in an earlier run is not journaled (and answered) a second time. The newest `REMEMBERED_KEYS` of them are
carried over into the rewritten file, so a second crash right after the restart does not forget them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from pathlib import Path
from typing import Any

from bot.domain.inbound import InboundMessage
from bot.storage.files import append_lines, write_atomic
from bot.storage.jsonl import dumps_line, read_jsonl

log = logging.getLogger(__name__)

# More than Telegram redelivers after a crash (one unacknowledged batch of at most 100 updates).
REMEMBERED_KEYS = 1000


class Inbox:
    """The journal of messages taken but not yet handled."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = asyncio.Lock()
        self._journaled_before: set[tuple[str, str]] = set()

    async def record(self, inbound: InboundMessage) -> InboundMessage | None:
        """Journal `inbound`; returns it with its journal id, or None when an earlier run journaled it."""
        if inbound.dedup_key is not None and (inbound.channel_type, inbound.dedup_key) in self._journaled_before:
            return None
        recorded = dataclasses.replace(inbound, journal_id=uuid.uuid4().hex)
        record = {field.name: getattr(recorded, field.name) for field in dataclasses.fields(recorded)}
        await append_lines(self._path, [dumps_line({"message": record})])
        return recorded

    async def record_edit(self, journal_id: str, text: str) -> None:
        """Journal the new text of a message recorded and not yet handled; `pending` hands it back edited."""
        await append_lines(self._path, [dumps_line({"edit": journal_id, "text": text})])

    async def done(self, journal_id: str) -> None:
        await append_lines(self._path, [dumps_line({"done": journal_id})])

    async def pending(self) -> list[InboundMessage]:
        """Messages recorded and never marked done, in arrival order; the file keeps only those (and keys)."""
        async with self._lock:
            records = await read_jsonl(self._path)
            finished = {record["done"] for record in records if "done" in record}
            # The newest edit of each message, in journal order (a later edit replaces an earlier one).
            edits = {
                str(record["edit"]): record["text"]
                for record in records
                if "edit" in record and isinstance(record.get("text"), str)
            }
            waiting: list[InboundMessage] = []
            keys: dict[tuple[str, str], None] = {}  # in arrival order, each once
            for record in records:
                for key in record.get("journaledKeys") or []:
                    if isinstance(key, list) and len(key) == 2:
                        keys[(str(key[0]), str(key[1]))] = None
                message = _inbound_from(record.get("message"))
                if message is None:
                    continue
                if message.dedup_key is not None:
                    keys.pop((message.channel_type, message.dedup_key), None)
                    keys[(message.channel_type, message.dedup_key)] = None
                if message.journal_id not in finished:
                    edited = edits.get(message.journal_id or "")
                    waiting.append(message if edited is None else dataclasses.replace(message, text=edited))
            newest = list(keys)[-REMEMBERED_KEYS:]
            self._journaled_before = set(newest)
            lines = [dumps_line({"journaledKeys": [list(key) for key in newest]})] if newest else []
            lines += [dumps_line({"message": dataclasses.asdict(m)}) for m in waiting]
            text = "".join(line + "\n" for line in lines)
            await write_atomic(self._path, text.encode("utf-8", "backslashreplace"))
        if waiting:
            log.info("[Inbox] %d messages were taken but not answered before the last stop", len(waiting))
        return waiting


def _inbound_from(raw: Any) -> InboundMessage | None:
    if not isinstance(raw, dict):
        return None
    names = {field.name for field in dataclasses.fields(InboundMessage)}
    try:
        return InboundMessage(**{key: value for key, value in raw.items() if key in names})
    except TypeError:
        log.warning("[Inbox] Skipped an unreadable journal entry")
        return None

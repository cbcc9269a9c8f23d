"""`TurnLedger`: whether each turn was received, answered and delivered, in `state/turns.jsonl`.

Records, one compact JSON object per line:

- `{"seen": [[channelType, key], ...]}`: transport keys handed over (Telegram's update ids), so a
  redelivery after a crash is recognised. Those of a received message go with its record; those of
  updates that made no turn (a refused sender, a command answered at once, a stale button) are
  written in one line by `flush`, which the channel awaits before it acknowledges the updates.
- `{"received": {...}}`: the message (`InboundMessage` fields), with its turn id (`journal_id`, also
  the id of its user message in the session).
- `{"edited": turnId, "text": ...}`: a message edited before its turn began is answered as edited.
- `{"answered": turnId, "reply": ...}`: the reply, written before it is sent, so a restart sends the
  same text without asking the model again. Only when the session on disk does not hold that text as
  the turn's answer (a failure's reply, a note put before the answer, a save that failed): otherwise
  the session is where a restart finds it, and no fsync is spent on the reply's path to say it twice.
- `{"delivered": turnId}`: the reply went out, or the turn ended without one (a failure the user was
  told of, /stop): it is not answered again.

Each append is fsync'd (`append_lines`) but *delivered*, whose fsync is left to the `DeferredSync`'s
next round or to the next append that is fsync'd, whichever comes first: losing it in a power cut sends
one answer again, as the window below does. Appends that arrive while one is being written go out
together in the next write (one fsync for all of them). A torn last line, a crash cut short, is
skipped on read and cut off by the next append. The file is rewritten atomically at `load` and after
every `compact_after` appended lines, with only what is still open and the newest `REMEMBERED_KEYS`
keys, so it stays small however long the bot runs.

One window no record can close: a crash after the transport took a reply and before "delivered" is
written. The next start sends the recorded reply again: no Bot API call can tell whether a send
arrived, and a repeated answer is better than a lost one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.domain.inbound import InboundMessage
from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, read_text_sync, write_atomic
from bot.storage.jsonl import dumps_line, parse_jsonl, read_jsonl

log = logging.getLogger(__name__)

# Far more than a transport redelivers after a crash (Telegram: one unacknowledged batch of at most 100).
REMEMBERED_KEYS = 2000
# Appended lines after which the file is rewritten with only what is open (about 3 per turn).
COMPACT_AFTER_LINES = 1000

TransportKey = tuple[str, str]


class TurnState(enum.Enum):
    RECEIVED = "received"
    ANSWERED = "answered"
    DELIVERED = "delivered"


@dataclass(frozen=True)
class OpenTurn:
    """A turn not yet delivered: its message (with its newest text) and, once answered, the reply."""

    inbound: InboundMessage
    reply: str | None = None

    @property
    def turn_id(self) -> str:
        return self.inbound.journal_id or ""


class TurnLedger:
    """Received, answered, delivered: per turn, durable, asked instead of any marker of one's own."""

    def __init__(
        self, path: Path, compact_after: int = COMPACT_AFTER_LINES, deferred: DeferredSync | None = None
    ) -> None:
        self._path = path
        self._deferred = deferred
        self._compact_after = compact_after
        self._open: dict[str, OpenTurn] = {}  # in arrival order
        self._delivered: OrderedDict[str, None] = OrderedDict()  # the newest delivered turn ids
        self._keys: OrderedDict[TransportKey, None] = OrderedDict()  # seen, oldest first
        self._unflushed: dict[TransportKey, None] = {}  # seen, not yet on disk
        # Each append: its records, whether they must be durable before it returns, and its caller's future.
        self._queue: list[tuple[list[dict[str, Any]], bool, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._appended = 0
        self._loaded = False

    @property
    def path(self) -> Path:
        return self._path

    async def load(self, legacy_state: Path | None = None) -> list[OpenTurn]:
        """Read the ledger (before anything is received), rewrite it compacted, return the open turns.

        `legacy_state`: the folder of the files an older version kept instead (`inbox.jsonl`,
        `telegram-updates.json`), taken over once when there is no ledger yet, then removed.
        """
        records = await read_jsonl(self._path)
        legacy: list[Path] = []
        if not records and not self._path.exists() and legacy_state is not None:
            records, legacy = await asyncio.to_thread(_legacy_records, legacy_state)
        self._open.clear()
        for record in records:
            self._apply(record)
        await self._rewrite()
        for path in legacy:
            path.unlink(missing_ok=True)
        self._loaded = True
        if self._open:
            log.info("[Ledger] %d turns were received but not delivered before the last stop", len(self._open))
        return self.open_turns()

    def open_turns(self) -> list[OpenTurn]:
        """The turns received and not delivered, in arrival order."""
        return list(self._open.values())

    def state(self, turn_id: str) -> TurnState | None:
        """How far a turn got; None for one this ledger does not know (or delivered long ago)."""
        turn = self._open.get(turn_id)
        if turn is not None:
            return TurnState.RECEIVED if turn.reply is None else TurnState.ANSWERED
        return TurnState.DELIVERED if turn_id in self._delivered else None

    def reply(self, turn_id: str) -> str | None:
        """The reply recorded for a turn answered and not yet delivered."""
        turn = self._open.get(turn_id)
        return None if turn is None else turn.reply

    # The transport's side.

    def first_sight(self, channel_type: str, key: str) -> bool:
        """False when the transport handed this key over before (a redelivery); otherwise remembers it."""
        seen = (channel_type, key)
        if seen in self._keys:
            return False
        self._remember(seen)
        self._unflushed[seen] = None
        return True

    async def flush(self) -> None:
        """Make every key seen so far durable; the transport awaits this before it acknowledges them.

        A failed write is logged, not raised: the bot keeps receiving on a full disk (the keys are tried
        again with the next flush; a crash meanwhile could answer a redelivered update twice)."""
        keys = list(self._unflushed)
        if not keys:
            return
        try:
            await self._append([{"seen": [list(key) for key in keys]}])
        except OSError as error:
            log.error(
                "[Ledger] Could not record %d update ids (%s); a redelivery could be answered twice", len(keys), error
            )

    # The pipeline's side.

    async def received(self, inbound: InboundMessage) -> InboundMessage:
        """Record a message durably; returns it with its turn id (kept when it has one: `/retry`)."""
        recorded = inbound if inbound.journal_id is not None else dataclasses.replace(inbound, journal_id=_new_id())
        await self._append([{"received": _fields_of(recorded)}])
        return recorded

    async def edited(self, turn_id: str, text: str) -> None:
        """A message received and not yet begun has a new text; it is answered as edited."""
        await self._append([{"edited": turn_id, "text": text}])

    async def answered(self, turn_id: str, reply: str) -> None:
        """The reply is stored with the conversation and about to be sent."""
        await self._append([{"answered": turn_id, "reply": reply}])

    async def delivered(self, turn_id: str) -> None:
        """The reply went out, or the turn ended without one: it is not to be answered again."""
        await self._append([{"delivered": turn_id}], durable=False)

    async def close(self) -> None:
        """Write what is seen and queued; called at stop."""
        await self.flush()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    # Writing.

    async def _append(self, records: list[dict[str, Any]], durable: bool = True) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((records, durable, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued(), name="turn ledger")
        await done

    async def _write_queued(self) -> None:
        """Write every queued append; those queued meanwhile go together in the next write."""
        while self._queue:
            batch, self._queue = self._queue, []
            records = [record for records, _, _ in batch for record in records]
            durable = self._deferred is None or any(must for _, must, _ in batch)
            try:
                await append_lines(
                    self._path, [dumps_line(record) for record in records], None if durable else self._deferred
                )
            except OSError as error:
                log.error("[Ledger] Could not write %s: %s", self._path, error)
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(OSError(error.errno, error.strerror, str(self._path)))
                continue
            for record in records:
                self._apply(record)
            for _, _, done in batch:
                if not done.done():
                    done.set_result(None)
            self._appended += len(records)
            if self._loaded and self._appended >= self._compact_after:
                await self._rewrite()

    async def _rewrite(self) -> None:
        """Replace the file with what is open and the newest keys (nothing else is ever asked of it)."""
        lines: list[str] = []
        if self._keys:
            lines.append(dumps_line({"seen": [list(key) for key in self._keys]}))
        for turn in self._open.values():
            lines.append(dumps_line({"received": _fields_of(turn.inbound)}))
            if turn.reply is not None:
                lines.append(dumps_line({"answered": turn.turn_id, "reply": turn.reply}))
        self._appended = 0
        try:
            await write_atomic(self._path, "".join(line + "\n" for line in lines).encode("utf-8", "backslashreplace"))
        except OSError as error:
            log.error("[Ledger] Could not compact %s: %s", self._path, error)
            return
        self._unflushed.clear()  # every key remembered is in the file now

    # The state, as the records written so far say.

    def _apply(self, record: dict[str, Any]) -> None:
        if isinstance(record.get("seen"), list):
            for key in record["seen"]:
                if isinstance(key, list) and len(key) == 2:
                    self._remember_written((str(key[0]), str(key[1])))
        elif "received" in record:
            inbound = _inbound_from(record["received"])
            if inbound is None or inbound.journal_id is None:
                return
            self._open[inbound.journal_id] = OpenTurn(inbound)
            self._delivered.pop(inbound.journal_id, None)
            if inbound.dedup_key is not None:
                self._remember_written((inbound.channel_type, inbound.dedup_key))
        elif "edited" in record:
            turn = self._open.get(str(record["edited"]))
            if turn is not None and isinstance(record.get("text"), str):
                self._open[turn.turn_id] = OpenTurn(dataclasses.replace(turn.inbound, text=record["text"]), turn.reply)
        elif "answered" in record:
            turn = self._open.get(str(record["answered"]))
            if turn is not None and isinstance(record.get("reply"), str):
                self._open[turn.turn_id] = OpenTurn(turn.inbound, record["reply"])
        elif "delivered" in record:
            turn_id = str(record["delivered"])
            self._open.pop(turn_id, None)
            self._delivered[turn_id] = None
            while len(self._delivered) > REMEMBERED_KEYS:
                self._delivered.popitem(last=False)

    def _remember_written(self, key: TransportKey) -> None:
        """A key a written record holds: remembered, and no longer waiting for `flush`."""
        self._remember(key)
        self._unflushed.pop(key, None)

    def _remember(self, key: TransportKey) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > REMEMBERED_KEYS:
            self._keys.popitem(last=False)


_INBOUND_FIELDS = tuple(field.name for field in dataclasses.fields(InboundMessage))


def _fields_of(inbound: InboundMessage) -> dict[str, Any]:
    """The message's fields by name: `dataclasses.asdict` without its deep copy (written out at once)."""
    return {name: getattr(inbound, name) for name in _INBOUND_FIELDS}


def _new_id() -> str:
    return uuid.uuid4().hex


def _inbound_from(raw: Any) -> InboundMessage | None:
    if not isinstance(raw, dict):
        return None
    try:
        return InboundMessage(**{key: value for key, value in raw.items() if key in _INBOUND_FIELDS})
    except TypeError:
        log.warning("[Ledger] Skipped an unreadable record")
        return None


def _legacy_records(state: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """The records of an older version's inbox journal and Telegram update ids, as ledger records."""
    records: list[dict[str, Any]] = []
    found: list[Path] = []
    updates = state / "telegram-updates.json"
    text = read_text_sync(updates)
    if text is not None:
        found.append(updates)
        try:
            records.append({"seen": [["telegram", str(int(value))] for value in json.loads(text)["seenUpdateIds"]]})
        except (ValueError, KeyError, TypeError) as error:
            log.warning("[Ledger] Ignoring unreadable %s (%s)", updates, error)
    inbox = state / "inbox.jsonl"
    text = read_text_sync(inbox)
    if text is not None:
        found.append(inbox)
        for record in parse_jsonl(text, inbox):
            if "message" in record:
                records.append({"received": record["message"]})
            elif "edit" in record:
                records.append({"edited": record["edit"], "text": record.get("text")})
            elif "done" in record:
                records.append({"delivered": record["done"]})
            elif isinstance(record.get("journaledKeys"), list):
                records.append({"seen": record["journaledKeys"]})
    if found:
        log.info("[Ledger] Took over %s from an earlier version", ", ".join(path.name for path in found))
    return records, found

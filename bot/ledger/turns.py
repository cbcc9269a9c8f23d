"""`TurnLedger` and the `Turn` it hands out: exactly-once delivery, recorded in a `store.LedgerStore`.

A message someone may send us becomes a `Turn` when it is received (`TurnLedger.receive`), when the
last stop left it open (`TurnLedger.reopen`), or when `/retry` asks for its question to be answered
again (`TurnLedger.retry`). The channel, the router and the runner pass the turn along; the turn
decides: whether an edit still replaces its text (`edited`, before it is begun), what a restart sends
without asking the model (`resume`), and it records its reply `answered` before the send and itself
`delivered` after it (or when it ends without one). Nobody else keeps a marker of a turn's progress.

Records, one compact JSON object each (`records` reads and writes a message), kept by the store: as lines
of `state/turns.jsonl` (`store.LedgerFile`), or as rows of PostgreSQL (`postgres.LedgerTables`):

- `{"seen": [[channelType, key], ...]}`: transport keys handed over (Telegram's update ids), so a
  redelivery after a crash is recognised. Those of a received message go with its record; those of
  updates that made no turn (a refused sender, a command answered at once, a stale button) are
  written in one line by `flush`, which the channel awaits before it acknowledges the updates.
- `{"held": [channelType, key], "update": {...}}`: an update the channel holds back instead of handing it
  over (a photo of a group's album, waiting for the photo that names the bot), as the transport gave it;
  `{"released": [[channelType, key], ...]}`: handed over or dropped since. Both are written by `flush`,
  in the append of its keys and before them, so an update acknowledged is kept or handed over, never
  lost to a stop or crash (at no fsync of its own); the next start holds it again (`held`).
- `{"received": {...}}`: the message, with its turn id (`journal_id`, also the id of its user message
  in the session).
- `{"edited": turnId, "text": ...}`: a message edited before its turn began is answered as edited.
- `{"joined": turnId, "attachment": {...}, "text": ...}`: another photo of the same album arrived before
  the turn began: the album is answered as one message, with the captions joined.
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
import contextlib
import dataclasses
import enum
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.message import Message, Role
from bot.domain.session import AgentSession
from bot.faults import UPDATE_CLAIMED, crash_point
from bot.ledger.records import attachment_of, legacy_records, received_message, received_record
from bot.ledger.store import REMEMBERED_KEYS, LedgerStore

log = logging.getLogger(__name__)

# Appended lines after which the file is rewritten with only what is open (about 3 per turn).
COMPACT_AFTER_LINES = 1000

TransportKey = tuple[str, str]
# A chat's session by id, as stored (None: the chat has none): where a reopened turn's question is looked for.
SessionLookup = Callable[[str], Awaitable[AgentSession | None]]


class TurnState(enum.Enum):
    RECEIVED = "received"
    ANSWERED = "answered"
    DELIVERED = "delivered"


@dataclass(frozen=True)
class OpenTurn:
    """A turn not yet delivered, as the records say: its id, its message (newest text), its reply if answered."""

    turn_id: str
    inbound: InboundMessage
    reply: str | None = None


class Turn:
    """One message's way from received to delivered; handed out by the `TurnLedger`, passed along by the rest.

    A turn the ledger does not hold (`Turn.unrecorded`, a refused sender's, one the disk refused) is
    handled the same way and records nothing: a restart does not answer it again.
    """

    def __init__(
        self,
        ledger: TurnLedger | None,
        turn_id: str | None,
        inbound: InboundMessage,
        reply: str | None = None,
        *,
        reopened: bool = False,
        recorded: bool = True,
    ) -> None:
        self.id = turn_id
        self._ledger = ledger
        # Where its records go: None when the ledger does not hold it.
        self._records = ledger if turn_id is not None and recorded else None
        self._inbound = inbound
        self._reply = reply
        # From a restart or /retry: its question may be in the session already, its answer too.
        self.reopened = reopened
        # Its question is in the session (found by `TurnLedger.reopen`, or a /retry's): it is not stored again.
        self.question_stored = False
        self._delivered = False

    @classmethod
    def unrecorded(cls, inbound: InboundMessage) -> Turn:
        """A turn no ledger holds (a command answered at once): answered once, never again after a restart."""
        return cls(None, None, inbound)

    @property
    def inbound(self) -> InboundMessage:
        """The message, with its newest text (an edit made before the turn began replaces it)."""
        return self._inbound

    @property
    def session_id(self) -> str:
        return self._inbound.session_id

    @property
    def recorded(self) -> bool:
        """Whether the ledger holds the turn (a restart before its delivery answers it)."""
        return self._records is not None

    @property
    def begun_before(self) -> bool:
        """Begun by the last run (or /retry): its question is in the session, or its reply recorded. It goes
        straight to the answer; the access check, a notice, the media intake were its first run's."""
        return self.question_stored or self._reply is not None

    @property
    def settled(self) -> bool:
        """Delivered: by this handle, or already (a /retry answered the question again meanwhile)."""
        if self._delivered:
            return True
        return self._records is not None and self.id is not None and self._records.state(self.id) is TurnState.DELIVERED

    def begin(self) -> InboundMessage:
        """The turn is taken from its chat's queue: its message as it is now; a later edit is a message of its own."""
        if self._ledger is not None:
            self._ledger._not_waiting(self)
        return self._inbound

    async def edited(self, text: str) -> None:
        """Its message was edited before the turn began: it is answered with `text` (recorded, so a crash
        before its turn does not bring back the first text)."""
        self._inbound = dataclasses.replace(self._inbound, text=text)
        await self._record_change("edited", {"text": text}, "an edit")

    async def joined(self, other: InboundMessage) -> None:
        """Another file of the same album arrived before the turn began: it is answered with this one, its
        caption after this one's (recorded, so a crash before the turn answers the whole album)."""
        if other.attachment is None:
            return
        self._inbound = with_album_file(self._inbound, other.attachment, other.text)
        change = {"attachment": dataclasses.asdict(other.attachment), "text": other.text}
        await self._record_change("joined", change, "a photo of an album")

    async def _record_change(self, kind: str, change: dict[str, Any], what: str) -> None:
        """Record a change of the waiting turn's message (`{kind: turn id, **change}`), so that a crash before
        the turn begins does not lose it; a failed write is logged."""
        if self._records is None or self.id is None:
            return
        try:
            await self._records._append([{kind: self.id, **change}])
        except OSError as error:
            log.error("[Ledger] Could not record %s (%s); a crash before its turn would lose it", what, error)

    def stored_question(self, session: AgentSession) -> Message | None:
        """The turn's user message, when the session holds it (a reopened turn's; a new one's is not there yet)."""
        if not self.reopened or self.id is None:
            return None
        return stored_question(session, self.id)

    def resume(self, session: AgentSession) -> str | None:
        """The reply to send as it is, without asking the model: a reopened turn answered before the stop,
        its delivery unknown (the reply the ledger recorded, else the answer the session holds to its
        question). None: the turn is to be answered (from its stored question, if there is one)."""
        if not self.reopened:
            return None
        if self._reply is not None:
            return self._reply
        question = self.stored_question(session)
        answer = stored_answer(session, question.id) if question is not None else None
        return answer.content if answer is not None else None

    async def answered(self, reply: str) -> None:
        """The reply is about to be sent: recorded, so a crash before the send sends this very text."""
        if self._records is None or self.id is None or self.settled:
            return
        try:
            await self._records._append([{"answered": self.id, "reply": reply}])
        except OSError as error:
            log.error(
                "[Ledger] Could not record %s's reply (%s); a crash before it is sent loses it", self.session_id, error
            )

    async def delivered(self) -> None:
        """The reply went out, or the turn ends without one: recorded once; a restart does not answer it again."""
        if self._delivered:
            return
        self._delivered = True
        if self._ledger is not None:
            self._ledger._not_waiting(self)
        if self._records is None or self.id is None:
            return
        try:
            await self._records._append([{"delivered": self.id}], durable=False)
        except OSError as error:
            log.error("[Ledger] Could not record %s's reply delivered (%s); it may go again", self.session_id, error)

    @contextlib.asynccontextmanager
    async def handled(self) -> AsyncIterator[None]:
        """Deliver the turn when the body ends, or fails for good (replaying it would fail again); a cancel
        (a shutdown cut it short) leaves it open, so the next start answers it."""
        try:
            yield
        except Exception:
            await self.delivered()
            raise
        await self.delivered()


class TurnLedger:
    """Received, answered, delivered: per turn, durable; hands out the `Turn` that records each step."""

    def __init__(self, store: LedgerStore, compact_after: int = COMPACT_AFTER_LINES) -> None:
        self._store = store
        self._compact_after = compact_after
        self._open: dict[str, OpenTurn] = {}  # in arrival order
        self._delivered: OrderedDict[str, None] = OrderedDict()  # the newest delivered turn ids
        self._keys: OrderedDict[TransportKey, None] = OrderedDict()  # seen, oldest first
        self._unflushed: dict[TransportKey, None] = {}  # seen, not yet on disk
        self._claimed: set[TransportKey] = set()  # claimed in a shared store, what they brought not yet kept
        # Updates the transport holds back (`hold`), as written, and the records `flush` writes next about them.
        self._held: dict[TransportKey, dict[str, Any]] = {}
        self._unflushed_holds: list[dict[str, Any]] = []
        # Turns queued and not yet begun, by (session, the channel's message id): an edit replaces their text.
        self._waiting: dict[tuple[str, str], Turn] = {}
        # Each append: its records, whether they must be durable before it returns, and its caller's future.
        self._queue: list[tuple[list[dict[str, Any]], bool, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._appended = 0
        self._loaded = False

    async def load(self) -> list[OpenTurn]:
        """Read the ledger (before anything is received), compact it, return the open turns.

        A store that is empty and new takes over the files kept before the ledger (`inbox.jsonl`,
        `telegram-updates.json` in its `legacy_state` folder) once, then they are removed.
        """
        records = await self._store.read()
        legacy: list[Path] = []
        legacy_state = self._store.legacy_state
        if not records and legacy_state is not None:
            records, legacy = await asyncio.to_thread(legacy_records, legacy_state)
        self._open.clear()
        self._held.clear()
        for record in records:
            self._apply(record)
        await self._rewrite()
        for path in legacy:
            path.unlink(missing_ok=True)
        self._loaded = True
        if self._open:
            log.info("[Ledger] %d turns were received but not delivered before the last stop", len(self._open))
        return self.open_turns()

    async def reopen(self, session_of: SessionLookup, channel_types: set[str]) -> list[Turn]:
        """Load the ledger and hand out the turns the last stop left open on these channels, in arrival order:
        never begun, cut short, or answered without the delivery of the answer being recorded. A turn of a
        channel not running now waits for a start that has it."""
        turns = await self._reopened(await self.load(), session_of, channel_types)
        if turns:
            log.info("[Ledger] %d messages were left unanswered by the last stop; answering them", len(turns))
        return turns

    async def adopt(self, session_of: SessionLookup, channel_types: set[str]) -> list[Turn]:
        """The turns another process sharing the store left open when it stopped or died, taken over to be
        answered here (as `reopen` hands out this process's own)."""
        records = await self._store.adopt()
        for record in records:
            self._apply(record)
        turn_ids = [
            str(record["received"].get("journal_id")) for record in records if isinstance(record.get("received"), dict)
        ]
        adopted = [self._open[turn_id] for turn_id in turn_ids if turn_id in self._open]
        turns = await self._reopened(adopted, session_of, channel_types)
        if turns:
            log.info("[Ledger] %d messages left unanswered by a process that is gone; answering them", len(turns))
        return turns

    async def _reopened(
        self, records: list[OpenTurn], session_of: SessionLookup, channel_types: set[str]
    ) -> list[Turn]:
        turns: list[Turn] = []
        for record in records:
            if record.inbound.channel_type not in channel_types:
                continue
            turn = Turn(self, record.turn_id, record.inbound, record.reply, reopened=True)
            session = await session_of(record.inbound.session_id)
            turn.question_stored = session is not None and stored_question(session, record.turn_id) is not None
            if not turn.begun_before:
                self._wait(turn)  # still to be begun: an edit arriving before its turn replaces its text
            turns.append(turn)
        return turns

    def open_turns(self) -> list[OpenTurn]:
        """The turns received and not delivered, in arrival order."""
        return list(self._open.values())

    def state(self, turn_id: str) -> TurnState | None:
        """How far a turn got; None for one this ledger does not know (or delivered long ago)."""
        turn = self._open.get(turn_id)
        if turn is not None:
            return TurnState.RECEIVED if turn.reply is None else TurnState.ANSWERED
        return TurnState.DELIVERED if turn_id in self._delivered else None

    # The transport's side.

    def first_sight(self, channel_type: str, key: str) -> bool:
        """False when the transport handed this key over before (a redelivery); otherwise remembers it."""
        seen = (channel_type, key)
        if seen in self._keys:
            return False
        self._remember(seen)
        self._unflushed[seen] = None
        return True

    async def claim(self, channel_type: str, key: str) -> bool:
        """`first_sight` across every process sharing the store: True for the one that takes the key first,
        or for the one that takes over the claim of a process that died before it kept what the key brought.

        A store one process keeps needs no write here (`flush` makes the key durable). A shared store that
        cannot be reached is logged and the update answered: a repeated answer is better than a lost one.
        The caller says `handed_over` once the update's message is recorded (or it made none)."""
        if not self._store.shared:
            return self.first_sight(channel_type, key)
        seen = (channel_type, key)
        if seen in self._keys:
            return False
        # Remembered while the store is asked, so a copy arriving meanwhile is refused here.
        self._remember(seen)
        try:
            first = await self._store.claim(channel_type, key)
        except OSError as error:
            log.error("[Ledger] Could not claim update %s (%s); another process may answer it too", key, error)
            self._unflushed[seen] = None
            return True
        if not first:
            # Forgotten: the store decides again for the next copy (its claimer may be gone by then).
            self._keys.pop(seen, None)
            return False
        self._claimed.add(seen)
        crash_point(UPDATE_CLAIMED)
        return True

    def handed_over(self, channel_type: str, key: str) -> None:
        """What a claimed key brought is kept (its turn recorded, or it made none): the next `flush` settles
        the key, so that no process takes the claim over from now on. Settled any earlier, a crash before
        the turn is recorded would lose the message."""
        seen = (channel_type, key)
        if seen in self._claimed:
            self._claimed.discard(seen)
            self._unflushed[seen] = None

    def hold(self, channel_type: str, key: str, update: dict[str, Any]) -> None:
        """The transport holds the update with this key back instead of handing it over (yet): kept by the next
        `flush`, before the key is acknowledged, until `release`; the next start gives it back (`held`)."""
        self._unflushed_holds.append({"held": [channel_type, key], "update": update})

    def release(self, channel_type: str, key: str) -> None:
        """A held update was handed over (its turn recorded) or dropped: no longer kept, from the next `flush`."""
        self._unflushed_holds.append({"released": [[channel_type, key]]})

    def held(self, channel_type: str) -> list[dict[str, Any]]:
        """The updates of a channel held back when the last process stopped, in the order they came."""
        return [update for (kind, _), update in self._held.items() if kind == channel_type]

    async def flush(self) -> None:
        """Make every key seen so far durable, and the updates held or released since; the transport awaits
        this before it acknowledges them.

        A failed write is logged, not raised: the bot keeps receiving on a full disk (the keys are tried
        again with the next flush; a crash meanwhile could answer a redelivered update twice)."""
        keys, holds = list(self._unflushed), self._unflushed_holds
        if not keys and not holds:
            return
        self._unflushed_holds = []
        # The holds first: a crash that keeps only the first records of an append never keeps a key seen
        # without the update it held.
        records = [*holds, *([{"seen": [list(key) for key in keys]}] if keys else [])]
        try:
            await self._append(records)
        except OSError as error:
            self._unflushed_holds = [*holds, *self._unflushed_holds]
            log.error(
                "[Ledger] Could not record %d update ids (%s); a redelivery could be answered twice", len(keys), error
            )

    # The router's side: a turn for each message, handed out as it is received.

    async def receive(self, inbound: InboundMessage, *, record: bool = True) -> Turn:
        """The turn of a message just received, recorded durably (`record` False: a refused sender's,
        kept for its place in the chat's queue only). On a full or read-only disk the turn is answered
        anyway, unrecorded (the reply says memory was not saved)."""
        turn_id = _new_id()
        if record:
            try:
                await self._append([{"received": received_record(turn_id, inbound)}])
            except OSError as error:
                log.error("[Ledger] Could not record a message (%s); a crash before its answer would lose it", error)
                record = False
        turn = Turn(self, turn_id, inbound, recorded=record)
        if not inbound.edited:
            self._wait(turn)
        return turn

    async def retry(self, inbound: InboundMessage, question_id: str) -> Turn:
        """A new turn for a question the session holds (`/retry`, whose answer was taken back): recorded under
        the question's id, so a crash before its new answer went out answers it after the restart."""
        turn: Turn
        try:
            await self._append([{"received": received_record(question_id, inbound)}])
            turn = Turn(self, question_id, inbound, reopened=True)
        except OSError as error:
            log.error("[Ledger] Could not record /retry's turn (%s); a crash before it is answered loses it", error)
            turn = Turn(self, question_id, inbound, reopened=True, recorded=False)
        turn.question_stored = True
        return turn

    def waiting(self, session_id: str, message_id: str | None) -> Turn | None:
        """The turn of a channel message still waiting in its chat's queue (an edit of it replaces its text)."""
        if message_id is None:
            return None
        return self._waiting.get((session_id, message_id))

    def waiting_album(self, inbound: InboundMessage) -> Turn | None:
        """The turn of a message of `inbound`'s album, from the same sender, still waiting in its chat's queue."""
        if inbound.media_group is None:
            return None
        return next(
            (
                turn
                for turn in self._waiting.values()
                if turn.inbound.media_group == inbound.media_group
                and turn.session_id == inbound.session_id
                and turn.inbound.user_id == inbound.user_id
            ),
            None,
        )

    def _wait(self, turn: Turn) -> None:
        if turn.inbound.message_id is not None:
            self._waiting[(turn.session_id, turn.inbound.message_id)] = turn

    def _not_waiting(self, turn: Turn) -> None:
        """The turn was begun (or ended): an edit of its message is a message of its own from now on."""
        key = (turn.session_id, turn.inbound.message_id or "")
        if self._waiting.get(key) is turn:
            del self._waiting[key]

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
            durable = any(must for _, must, _ in batch)
            try:
                await self._store.append(records, durable)
            except OSError as error:
                log.error("[Ledger] Could not write %s: %s", self._store.name, error)
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(OSError(error.errno, error.strerror or str(error), self._store.name))
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
        """Compact the store to what is open and the newest keys (nothing else is ever asked of it)."""
        records: list[dict[str, Any]] = []
        if self._keys:
            records.append({"seen": [list(key) for key in self._keys]})
        records.extend({"held": list(key), "update": update} for key, update in self._held.items())
        for turn in self._open.values():
            records.append({"received": received_record(turn.turn_id, turn.inbound)})
            if turn.reply is not None:
                records.append({"answered": turn.turn_id, "reply": turn.reply})
        self._appended = 0
        try:
            await self._store.compact(records)
        except OSError as error:
            log.error("[Ledger] Could not compact %s: %s", self._store.name, error)
            return
        self._unflushed.clear()  # every key remembered is in the file now

    # The state, as the records written so far say.

    def _apply(self, record: dict[str, Any]) -> None:
        if isinstance(record.get("seen"), list):
            for key in record["seen"]:
                if isinstance(key, list) and len(key) == 2:
                    self._remember_written((str(key[0]), str(key[1])))
        elif isinstance(record.get("held"), list) and len(record["held"]) == 2:
            held = (str(record["held"][0]), str(record["held"][1]))
            if isinstance(record.get("update"), dict):
                self._held[held] = record["update"]
                self._remember_written(held)
        elif isinstance(record.get("released"), list):
            for key in record["released"]:
                if isinstance(key, list) and len(key) == 2:
                    self._held.pop((str(key[0]), str(key[1])), None)
        elif "received" in record:
            received = received_message(record["received"])
            if received is None:
                return
            turn_id, inbound = received
            self._open[turn_id] = OpenTurn(turn_id, inbound)
            self._delivered.pop(turn_id, None)
            if inbound.dedup_key is not None:
                self._remember_written((inbound.channel_type, inbound.dedup_key))
        elif "edited" in record:
            turn = self._open.get(str(record["edited"]))
            if turn is not None and isinstance(record.get("text"), str):
                self._open[turn.turn_id] = dataclasses.replace(
                    turn, inbound=dataclasses.replace(turn.inbound, text=record["text"])
                )
        elif "joined" in record:
            turn = self._open.get(str(record["joined"]))
            if turn is not None and isinstance(record.get("attachment"), dict):
                inbound = with_album_file(
                    turn.inbound, attachment_of(record["attachment"]), str(record.get("text") or "")
                )
                self._open[turn.turn_id] = dataclasses.replace(turn, inbound=inbound)
        elif "answered" in record:
            turn = self._open.get(str(record["answered"]))
            if turn is not None and isinstance(record.get("reply"), str):
                self._open[turn.turn_id] = dataclasses.replace(turn, reply=record["reply"])
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
        self._claimed.discard(key)

    def _remember(self, key: TransportKey) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > REMEMBERED_KEYS:
            self._keys.popitem(last=False)


def with_album_file(inbound: InboundMessage, attachment: Attachment, caption: str) -> InboundMessage:
    """`inbound` with another file of its album, and that file's caption, if any, after its text."""
    text = "\n\n".join(part for part in (inbound.text, caption) if part.strip())
    return dataclasses.replace(inbound, album=(*inbound.album, attachment), text=text)


def _new_id() -> str:
    return uuid.uuid4().hex


def stored_question(session: AgentSession, turn_id: str) -> Message | None:
    """The user message of a turn, if the session holds it (its id is the turn's id in the ledger)."""
    return next((m for m in reversed(session.messages) if m.role is Role.USER and m.id == turn_id), None)


def stored_answer(session: AgentSession, user_message_id: str) -> Message | None:
    """The final answer stored for a user message: its last assistant text before the next user message."""
    messages = session.messages
    # Looked for from the end: the turn asked about is nearly always the newest one.
    start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id == user_message_id), None)
    if start is None:
        return None
    answer = None
    for message in messages[start + 1 :]:
        if message.role is Role.USER:
            break
        if message.role is Role.ASSISTANT and message.content and not message.tool_calls:
            answer = message
    return answer

"""`Outbound`: the one step through which the pipeline's text reaches a chat.

Replies, the live edits that show a reply while the model writes it, error replies and notes all go out
here, and the turn's progress goes into the ledger as they do: "answered", with the reply's text, just
before the reply is sent (unless the session holds that very text as the turn's answer already: a
restart finds it there); "delivered" as soon as it went out, or when the turn ends without one. The
router and the runner hold a `TurnOutbound` for the message they handle, never the channel's sending
side; the systems get only the live reply stream it opens.

A reply that cannot be sent is logged and counted; the turn is in the session either way (the user can
ask again or see it in the history), and it is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from bot.channels.base import Channel
from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream
from bot.ledger.turns import TurnLedger, TurnState
from bot.metrics import BotMetrics

log = logging.getLogger(__name__)

TYPING_REFRESH_SECONDS = 4.0  # Telegram shows "typing…" for about 5 s per call

# Typing indicators still on their way after their turn's body ended (see `TurnOutbound.typing`).
_refreshers: set[asyncio.Task[None]] = set()


class Outbound:
    """Opens a `TurnOutbound` for each message handled; shares the ledger and the metrics."""

    def __init__(self, ledger: TurnLedger | None = None, metrics: BotMetrics | None = None) -> None:
        self.ledger = ledger
        self._metrics = metrics or BotMetrics()

    def for_turn(self, channel: Channel, inbound: InboundMessage) -> TurnOutbound:
        """What goes to `inbound`'s chat while it is handled; its turn is the ledger's `journal_id`, if any."""
        return TurnOutbound(channel, inbound, self.ledger, self._metrics)


class TurnOutbound:
    """Everything one message's handling sends to its chat, and the ledger records of its turn."""

    def __init__(
        self, channel: Channel, inbound: InboundMessage, ledger: TurnLedger | None, metrics: BotMetrics
    ) -> None:
        self._channel = channel
        self._chat_id = inbound.chat_id
        self._channel_type = inbound.channel_type
        self._session_id = inbound.session_id
        self._turn_id = inbound.journal_id if ledger is not None else None
        self._ledger = ledger
        self._metrics = metrics
        self._stream: ReplyStream | None = None
        self._settled = False

    @property
    def settled(self) -> bool:
        """Whether the turn is delivered already (a restart's backlog may hold one a `/retry` answered)."""
        if self._settled:
            return True
        return (
            self._ledger is not None
            and self._turn_id is not None
            and (self._ledger.state(self._turn_id) is TurnState.DELIVERED)
        )

    def recorded_reply(self) -> str | None:
        """The reply the ledger holds for this turn: answered before a stop, its delivery not recorded."""
        if self._ledger is None or self._turn_id is None:
            return None
        return self._ledger.reply(self._turn_id)

    async def send(self, text: str) -> str | None:
        """A message that is not the turn's reply (a note, a notice, a command's answer), as the channel sends it."""
        return await self._channel.send_text(self._chat_id, text)

    def open_stream(self) -> ReplyStream | None:
        """A stream that shows the reply while it is written, when the channel can; `reply` finishes it."""
        self._stream = self._channel.open_stream(self._chat_id)
        return self._stream

    @contextlib.asynccontextmanager
    async def typing(self) -> AsyncIterator[None]:
        """Keep the chat's typing indicator on while the body runs: sent at once, then every
        `TYPING_REFRESH_SECONDS` by a timer (unless the last one is still on its way).

        When the body ends the timer stops; an indicator on its way is never cancelled, nor waited for:
        cancelling a Bot API request that waits for a pooled connection can leave that connection occupied
        for good (httpcore 1.0.9, encode/httpcore#1093), and once all of the pool's are, no reply goes out
        (seen in bursts to many chats). It finishes by itself, beside the reply."""
        loop = asyncio.get_running_loop()
        sending: asyncio.Task[None] | None = None
        timer: asyncio.TimerHandle | None = None

        def indicate() -> None:
            nonlocal sending, timer
            if sending is None or sending.done():
                sending = loop.create_task(self._send_typing())
                _refreshers.add(sending)  # a task nobody holds may be collected before it ends
                sending.add_done_callback(_refreshers.discard)
            timer = loop.call_later(TYPING_REFRESH_SECONDS, indicate)

        indicate()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()

    async def _send_typing(self) -> None:
        try:
            await self._channel.send_typing(self._chat_id)
        except Exception as error:
            log.debug("[Pipeline] Typing indicator failed: %s", error)

    async def reply(
        self, text: str | None, footnote: str | None = None, *, failed: bool = False, stored: bool = False
    ) -> bool:
        """Deliver the turn's reply (or the error that ends it) and a footnote after it; True once the reply
        went out. A streamed reply is finished in place and the footnote follows as a message of its own;
        otherwise both go as one message. Recorded answered before, delivered after.

        `stored`: the session holds `text`, written and fsync'd, as the answer to the turn's question, so a
        restart finds it there and sends it as it is; the "answered" record would say the same thing, and
        its fsync is left off the reply's path."""
        streamed = self._stream is not None and not failed and bool(text)
        if text and not stored:
            await self._record_answered(text)
        delivered = False
        with self._failure_logged():
            if streamed and self._stream is not None and text:
                await self._stream.finish(text)
                delivered = True
                if footnote:
                    await self._channel.send_text(self._chat_id, footnote)
            elif text or footnote:
                whole = f"{text}\n\n{footnote}" if text and footnote else (text or footnote or "")
                await self._channel.send_text(self._chat_id, whole)
                delivered = bool(text) and not failed
        await self.settle()
        if delivered:
            self._metrics.replies_out.labels(self._channel_type).inc()
        return delivered

    async def resend(self, text: str) -> None:
        """Send a reply answered before the last stop whose delivery was never recorded (no model call)."""
        log.info("[Pipeline] Sending %s the answer stored before the last stop, delivery unknown", self._session_id)
        with self._failure_logged():
            await self._channel.send_text(self._chat_id, text)
        await self.settle()

    @contextlib.contextmanager
    def _failure_logged(self) -> Iterator[None]:
        """A reply that cannot be sent is counted and logged, not raised: the turn is in the session, and the
        user can ask again or see it in the history (a cancel, not an `Exception`, still goes through)."""
        try:
            yield
        except Exception as error:
            self._metrics.errors.labels("delivery").inc()
            log.error("[Pipeline] Reply to %s could not be delivered: %s", self._session_id, error)

    @contextlib.asynccontextmanager
    async def settled_after(self) -> AsyncIterator[None]:
        """Settle the turn when the body ends, or fails for good (replaying it would fail again); a cancel
        (a shutdown cut it short) leaves it open, so the next start answers it."""
        try:
            yield
        except Exception:
            await self.settle()
            raise
        await self.settle()

    async def settle(self) -> None:
        """Record the turn delivered (its reply went out, or it ends without one), once; a restart leaves it."""
        if self._settled:
            return
        self._settled = True
        if self._ledger is None or self._turn_id is None:
            return
        try:
            await self._ledger.delivered(self._turn_id)
        except OSError as error:
            log.error("[Pipeline] Could not record %s's reply delivered (%s); it may go again", self._session_id, error)

    async def _record_answered(self, text: str) -> None:
        if self._ledger is None or self._turn_id is None or self._settled:
            return
        try:
            await self._ledger.answered(self._turn_id, text)
        except OSError as error:
            log.error(
                "[Pipeline] Could not record %s's reply (%s); a crash before it is sent loses it",
                self._session_id,
                error,
            )

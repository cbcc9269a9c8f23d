"""`Outbound`: the one step through which the pipeline's text reaches a chat.

Replies, the live edits that show a reply while the model writes it, error replies and notes all go out
here, around the turn's own records (`bot.ledger.turns.Turn`): `answered`, with the reply's text, just
before the reply is sent (unless the session holds that very text as the turn's answer already: a
restart finds it there); `delivered` as soon as it went out, or when the turn ends without one. The
router and the runner hold a `TurnOutbound` for the turn they handle, never the channel's sending
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
from bot.clock import Clock
from bot.domain.turn import ReplyStream
from bot.ledger.turns import Turn
from bot.metrics import BotMetrics

log = logging.getLogger(__name__)

TYPING_REFRESH_SECONDS = 4.0  # Telegram shows "typing…" for about 5 s per call

# Typing indicators still on their way after their turn's body ended (see `TurnOutbound.typing`).
_refreshers: set[asyncio.Task[None]] = set()


class Outbound:
    """Opens a `TurnOutbound` for each turn handled; shares the metrics and the clock of the typing refresh."""

    def __init__(self, metrics: BotMetrics | None = None, clock: Clock | None = None) -> None:
        self._metrics = metrics or BotMetrics()
        self._clock = clock or Clock()

    def for_turn(self, channel: Channel, turn: Turn) -> TurnOutbound:
        """What goes to the chat of `turn` while it is handled."""
        return TurnOutbound(channel, turn, self._metrics, self._clock)


class TurnOutbound:
    """Everything one turn's handling sends to its chat; the turn records its reply around the send."""

    def __init__(self, channel: Channel, turn: Turn, metrics: BotMetrics, clock: Clock) -> None:
        self._channel = channel
        self._clock = clock
        self.turn = turn
        self._chat_id = turn.inbound.chat_id
        self._channel_type = turn.inbound.channel_type
        self._session_id = turn.session_id
        self._metrics = metrics
        self._stream: ReplyStream | None = None

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
        `TYPING_REFRESH_SECONDS` of the clock (unless the last one is still on its way).

        When the body ends the refresh stops; an indicator on its way is never cancelled, nor waited for:
        cancelling a Bot API request that waits for a pooled connection can leave that connection occupied
        for good (httpcore 1.0.9, encode/httpcore#1093), and once all of the pool's are, no reply goes out
        (seen in bursts to many chats). It finishes by itself, beside the reply."""
        refreshing = asyncio.create_task(self._keep_typing(self._indicate(None)), name=f"typing {self._session_id}")
        try:
            yield
        finally:
            refreshing.cancel()

    async def _keep_typing(self, sending: asyncio.Task[None]) -> None:
        while True:
            await self._clock.sleep(TYPING_REFRESH_SECONDS)
            sending = self._indicate(sending)

    def _indicate(self, sending: asyncio.Task[None] | None) -> asyncio.Task[None]:
        """A typing indicator on its way: `sending` while it still is, else a new one."""
        if sending is not None and not sending.done():
            return sending
        sending = asyncio.create_task(self._send_typing())
        _refreshers.add(sending)  # a task nobody holds may be collected before it ends
        sending.add_done_callback(_refreshers.discard)
        return sending

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
            await self.turn.answered(text)
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
        await self.turn.delivered()
        if delivered:
            self._metrics.replies_out.labels(self._channel_type).inc()
        return delivered

    async def resend(self, text: str) -> None:
        """Send a reply answered before the last stop whose delivery was never recorded (no model call)."""
        log.info("[Pipeline] Sending %s the answer stored before the last stop, delivery unknown", self._session_id)
        with self._failure_logged():
            await self._channel.send_text(self._chat_id, text)
        await self.turn.delivered()

    @contextlib.contextmanager
    def _failure_logged(self) -> Iterator[None]:
        """A reply that cannot be sent is counted and logged, not raised: the turn is in the session, and the
        user can ask again or see it in the history (a cancel, not an `Exception`, still goes through)."""
        try:
            yield
        except Exception as error:
            self._metrics.errors.labels("delivery").inc()
            log.error("[Pipeline] Reply to %s could not be delivered: %s", self._session_id, error)

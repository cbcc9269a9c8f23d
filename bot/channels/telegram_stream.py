"""`TelegramReplyStream`: a reply shown in Telegram while the model writes it.

Nothing is sent until `toolLoop.streamEditIntervalSeconds` has passed (the typing indicator covers the
wait), so a quick answer is one plain message. After that the text so far is shown at most once per
interval. The text is split like any reply, so when it grows past what one message holds it rolls over
into a new message instead of failing; a part whose rendering changed (a code block closed later) is
edited to match.

In a private chat the part still being written is a draft (sendMessageDraft): it grows in place without
"edited" marks, and the real sendMessage at the end replaces it. Where Telegram refuses drafts (groups
never have them; an older Bot API server may not know the method) the stream falls back to sending the
first part and editing it (editMessageText).

A chat that refuses the reply while it is written gets it where `ChatRedirects` sends it instead, whole,
and the rest of the reply follows there: the supergroup a group became, or the General topic of a forum
topic closed or deleted meanwhile (led by a line that says which topic it is for). A message of the reply
that is gone when it is to be edited (deleted by hand, or with its topic) is sent anew.

Updates are best effort: one that fails is logged and live updates stop. `finish` shows the final
text with the full retry policy; if that fails it is logged (the turn is in the session either way).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from bot.channels.telegram_api import BadRequest, Refused, TelegramApiError, TelegramChat
from bot.channels.telegram_delivery import DeliveryFailed, TelegramDelivery
from bot.channels.telegram_format import TelegramText, split_for_telegram
from bot.channels.telegram_redirects import ChatRedirects, led_by
from bot.clock import Clock
from bot.settings import RuntimeConfig, TelegramConfig

log = logging.getLogger(__name__)

# Live updates of stopped turns still on their way: held until done (a task nobody holds may be collected).
_finishing: set[asyncio.Future[None]] = set()


class TelegramReplyStream:
    """One streamed reply in one chat: the messages it occupies and what each shows."""

    def __init__(
        self,
        delivery: TelegramDelivery,
        chat: TelegramChat,
        config: Callable[[], RuntimeConfig],
        clock: Clock,
        redirects: ChatRedirects,
    ) -> None:
        """`redirects` says where the reply goes when `chat` refuses it."""
        self._delivery = delivery
        self._redirects = redirects
        self._clock = clock
        self._chat = chat
        # Leads the reply where it was sent instead of its chat (None: in its chat, or nothing to say).
        self._note: str | None = None
        # The configuration as the turn began: read once, not at each piece of text the model sends.
        self._config = config()
        self._opened = clock.monotonic()
        self._last_shown: float | None = None
        self._messages: list[tuple[int, TelegramText]] = []  # (message id, the part as shown)
        self._live = True
        # Private chats have positive ids (the user's), groups negative; a draft id only has to be non-zero.
        self._draft_id: int | None = secrets.randbelow(2**31 - 1) + 1 if chat.id > 0 else None

    async def update(self, text: str) -> None:
        if not self._live or not text.strip():
            return
        interval = self._config.tool_loop.stream_edit_interval_seconds
        now = self._clock.monotonic()
        if now - (self._last_shown if self._last_shown is not None else self._opened) < interval:
            return
        self._last_shown = now
        # A turn stopped meanwhile (/stop) does not cut the update short: it finishes by itself. A Bot API
        # request cancelled while it waits for a pooled connection can hold that connection for good
        # (httpcore 1.0.9, encode/httpcore#1093), and once all of the pool's are, no reply goes out.
        showing = asyncio.ensure_future(self._shown(text, final=False))
        try:
            await asyncio.shield(showing)
        except asyncio.CancelledError:
            _finishing.add(showing)
            showing.add_done_callback(self._finished_alone)
            raise
        except (DeliveryFailed, TelegramApiError) as error:
            self._live = False
            log.warning("[Telegram] Live update of a reply to %s failed; the final text follows: %s", self._chat, error)

    def _finished_alone(self, showing: asyncio.Future[None]) -> None:
        _finishing.discard(showing)
        if not showing.cancelled() and (error := showing.exception()) is not None:
            log.info("[Telegram] Live update of a stopped reply to %s failed: %s", self._chat, error)

    async def finish(self, text: str) -> None:
        self._live = False
        try:
            await self._shown(text, final=True)
        except (DeliveryFailed, TelegramApiError) as error:
            log.error("[Telegram] Reply to %s could not be delivered: %s", self._chat, error)

    async def _shown(self, markdown: str, *, final: bool) -> None:
        """`_show` in the chat, or where the reply goes when the chat refuses it (`ChatRedirects`)."""
        await self._redirects.send(self._chat, lambda chat, note: self._show_in(chat, note, markdown, final=final))

    async def _show_in(self, chat: TelegramChat, note: str | None, markdown: str, *, final: bool) -> None:
        if chat != self._chat:
            # The reply goes on there, whole: what was shown stays where it was.
            self._chat, self._note, self._messages = chat, note, []
        await self._show(led_by(self._note, markdown), final=final)

    async def _show(self, markdown: str, *, final: bool) -> None:
        config = self._config.telegram
        if not final:
            config = config.model_copy(update={"delivery_attempts": 1})
        parts = split_for_telegram(markdown)
        drafting = self._draft_id is not None and not final and bool(parts)
        for index, part in enumerate(parts[:-1] if drafting else parts):
            if index < len(self._messages):
                message_id, shown = self._messages[index]
                if shown != part:
                    self._messages[index] = (await self._edited(message_id, part, config), part)
            else:
                message_id = await self._delivery.send_part(self._chat, part, config)
                self._messages.append((message_id, part))
        if drafting:
            await self._draft(parts[-1], config)

    async def _edited(self, message_id: int, part: TelegramText, config: TelegramConfig) -> int:
        """The message `message_id` edited to show `part`, or `part` sent anew when the message is gone; the id
        of the message that shows it."""
        try:
            await self._delivery.edit_part(self._chat.id, message_id, part, config)
            return message_id
        except DeliveryFailed as failure:
            gone = failure.__cause__
            if not (isinstance(gone, BadRequest) and gone.message_gone):
                raise
        log.info("[Telegram] A message of the reply to %s is gone; sending its part anew", self._chat)
        return await self._delivery.send_part(self._chat, part, config)

    async def _draft(self, part: TelegramText, config: TelegramConfig) -> None:
        assert self._draft_id is not None
        try:
            await self._delivery.draft_part(self._chat.id, self._draft_id, part, config)
        except DeliveryFailed as failure:
            if not isinstance(failure.__cause__, BadRequest | Refused):
                raise
            log.info("[Telegram] Drafts refused in %s (%s); editing a message instead", self._chat, failure)
            self._draft_id = None
            message_id = await self._delivery.send_part(self._chat, part, config)
            self._messages.append((message_id, part))

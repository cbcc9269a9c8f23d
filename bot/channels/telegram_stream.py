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

A group upgraded to a supergroup while the reply was written (Telegram refuses the old id, naming the new
one) gets the whole reply in the supergroup, and the channel is told (`upgraded`).

Updates are best effort: one that fails is logged and live updates stop. `finish` shows the final
text with the full retry policy; if that fails it is logged (the turn is in the session either way).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable

from bot.channels.telegram_api import BadRequest, ChatUpgraded, Refused, TelegramApiError, TelegramChat
from bot.channels.telegram_delivery import DeliveryFailed, TelegramDelivery
from bot.channels.telegram_format import TelegramText, split_for_telegram
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
        upgraded: Callable[[int, int], Awaitable[None]] | None = None,
    ) -> None:
        """`upgraded(old id, new id)` is told when the chat turns out to be a group upgraded to a supergroup."""
        self._delivery = delivery
        self._upgraded = upgraded
        self._clock = clock
        self._chat = chat
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
        """`_show`, in the supergroup when the group was upgraded to one."""
        try:
            await self._show(markdown, final=final)
            return
        except DeliveryFailed as failure:
            upgraded = failure.__cause__
            if not isinstance(upgraded, ChatUpgraded):
                raise
        log.warning("[Telegram] Chat %s was upgraded to the supergroup %s; the reply goes there", self._chat,
                    upgraded.new_chat_id)  # fmt: skip
        if self._upgraded is not None:
            await self._upgraded(self._chat.id, upgraded.new_chat_id)
        self._chat = TelegramChat(upgraded.new_chat_id, self._chat.thread_id)
        self._messages = []  # what was shown stays in the old group
        await self._show(markdown, final=final)

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
                    await self._delivery.edit_part(self._chat.id, message_id, part, config)
                    self._messages[index] = (message_id, part)
            else:
                message_id = await self._delivery.send_part(self._chat, part, config)
                self._messages.append((message_id, part))
        if drafting:
            await self._draft(parts[-1], config)

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

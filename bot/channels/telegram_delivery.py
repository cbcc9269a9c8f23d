"""Getting a reply to a Telegram chat: formatted, split under 4096, retried without duplicates.

- The model's Markdown becomes text + entities (`telegram_format`), cut into parts that each stand alone.
- A part Telegram refuses with "can't parse entities" is sent again as the same text without formatting.
- A part Telegram refuses with "message is too long" (a server that counts differently) is sent again
  cut into halves, without formatting.
- 429: the `retry_after` Telegram asks for is waited out (up to `maxRetryAfterSeconds`), then the part is
  sent again. 5xx and connection failures are retried with a doubling backoff. Both were not applied by
  Telegram, so the retry cannot make a second copy.
- A send whose answer does not come in time (`sendTimeoutSeconds`) may have arrived: it is never
  repeated. It is logged; the reply stays in the session either way.
- When a part cannot be delivered, `DeliveryFailed` is raised and the remaining parts are not sent
  (a reply with a hole in the middle would mislead).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.channels.telegram_api import (
    AnswerTimedOut,
    BadRequest,
    RetryAfter,
    TelegramApiError,
    TelegramBackend,
    TelegramChat,
    Transient,
)
from bot.channels.telegram_format import TELEGRAM_MESSAGE_LIMIT, TelegramText, plain_text_parts, split_for_telegram
from bot.settings import TelegramConfig

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MAX_BACKOFF_SECONDS = 30.0


class DeliveryFailed(Exception):
    """A reply (or part of it) could not be delivered; the message says why."""


async def call_with_retries(call: Callable[[], Awaitable[_T]], config: TelegramConfig, what: str) -> _T:
    """Run one Bot API call, repeating it only when Telegram certainly did not apply it."""
    backoff = config.retry_backoff_seconds
    for attempt in range(1, config.delivery_attempts + 1):
        last = attempt == config.delivery_attempts
        try:
            return await call()
        except RetryAfter as error:
            if last or error.retry_after > config.max_retry_after_seconds:
                raise DeliveryFailed(f"{what}: flood control ({error.description})") from error
            log.warning("[Telegram] %s: 429, waiting %.0f s as asked (try %d)", what, error.retry_after, attempt)
            await asyncio.sleep(error.retry_after)
        except Transient as error:
            if last:
                raise DeliveryFailed(f"{what}: {error.description} after {attempt} tries") from error
            log.warning("[Telegram] %s: %s; retrying in %.1f s (try %d)", what, error.description, backoff, attempt)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
        except AnswerTimedOut as error:
            raise DeliveryFailed(f"{what}: no answer in time; not repeated, it may have arrived") from error
        except TelegramApiError as error:
            raise DeliveryFailed(f"{what}: {error.description}") from error
    raise AssertionError("unreachable: the last attempt returns or raises")


class TelegramDelivery:
    """Sends and edits replies through a backend with the retry policy of the running config."""

    def __init__(self, backend: TelegramBackend) -> None:
        self._backend = backend

    async def send(self, chat: TelegramChat, markdown: str, config: TelegramConfig) -> int | None:
        """Deliver a Markdown reply in as many parts as needed; returns the id of the last part."""
        last_id: int | None = None
        for part in split_for_telegram(markdown, TELEGRAM_MESSAGE_LIMIT):
            last_id = await self.send_part(chat, part, config)
        return last_id

    async def send_part(self, chat: TelegramChat, part: TelegramText, config: TelegramConfig) -> int:
        """Send one rendered part (at most one message long); returns the id of the (last) message sent."""
        try:
            return await self._send_one(chat, part, config)
        except DeliveryFailed as failure:
            refused = failure.__cause__
            if not (isinstance(refused, BadRequest) and refused.too_long):
                raise
        log.warning("[Telegram] sendMessage to %s: Telegram found a part too long; sending it in halves", chat)
        message_id = 0
        for piece in plain_text_parts(part.text, TELEGRAM_MESSAGE_LIMIT // 2):
            message_id = await self._send_one(chat, TelegramText(piece, []), config)
        return message_id

    async def _send_one(self, chat: TelegramChat, part: TelegramText, config: TelegramConfig) -> int:
        """sendMessage with one part; plain text if its formatting is refused."""
        timeout = config.send_timeout_seconds

        async def send(entities: list[dict[str, object]] | None) -> int:
            return await self._backend.send_message(chat, part.text, entities, timeout)

        return await self._with_plain_fallback(send, part, config, f"sendMessage to {chat}")

    async def edit(self, chat_id: int, message_id: int, markdown: str, config: TelegramConfig) -> None:
        """Replace a message's text; an identical edit is not an error. Text beyond one message is cut."""
        parts = split_for_telegram(markdown, TELEGRAM_MESSAGE_LIMIT)
        if len(parts) > 1:
            log.warning(
                "[Telegram] Edit of %s/%s is longer than one message; showing the first part", chat_id, message_id
            )
        if parts:
            await self.edit_part(chat_id, message_id, parts[0], config)

    async def edit_part(self, chat_id: int, message_id: int, part: TelegramText, config: TelegramConfig) -> None:
        """Replace a message with one rendered part; "message is not modified" counts as done."""
        timeout = config.send_timeout_seconds

        async def edit(entities: list[dict[str, object]] | None) -> None:
            try:
                await self._backend.edit_message_text(chat_id, message_id, part.text, entities, timeout)
            except BadRequest as error:
                if not error.not_modified:
                    raise

        await self._with_plain_fallback(edit, part, config, f"editMessageText {chat_id}/{message_id}")

    async def draft_part(self, chat_id: int, draft_id: int, part: TelegramText, config: TelegramConfig) -> None:
        """Show one rendered part as the chat's draft (private chats only)."""

        async def draft(entities: list[dict[str, object]] | None) -> None:
            await self._backend.send_message_draft(chat_id, draft_id, part.text, entities)

        await self._with_plain_fallback(draft, part, config, f"sendMessageDraft to {chat_id}")

    async def _with_plain_fallback(
        self,
        call: Callable[[list[dict[str, object]] | None], Awaitable[_T]],
        part: TelegramText,
        config: TelegramConfig,
        what: str,
    ) -> _T:
        try:
            return await call_with_retries(lambda: call(part.entities or None), config, what)
        except DeliveryFailed as failure:
            refused = failure.__cause__
            if not (part.entities and isinstance(refused, BadRequest) and refused.cant_parse_entities):
                raise
            log.warning("[Telegram] %s: formatting refused (%s); sending as plain text", what, refused.description)
        return await call_with_retries(lambda: call(None), config, f"{what} (plain)")

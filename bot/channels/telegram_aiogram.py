"""`AiogramBackend`: the Telegram channel over aiogram 3 (`TELEGRAM_BACKEND=aiogram`).

Uses aiogram's `Bot` for every call, getUpdates included, without a `Dispatcher`: the channel's own
polling loop (`telegram_polling`) acknowledges an update only once the turn ledger holds it, and the channel's
per-chat queues do what aiogram's routers would.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    AiogramError,
    ClientDecodeError,
    TelegramBadRequest,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods.base import TelegramMethod
from aiogram.types import BotCommand, BufferedInputFile, MessageEntity

from bot.channels.telegram_api import (
    AnswerTimedOut,
    BadRequest,
    ChatUpgraded,
    Refused,
    RetryAfter,
    TelegramChat,
    Transient,
)
from bot.channels.telegram_updates import BotIdentity

log = logging.getLogger(__name__)

_T = TypeVar("_T")
CONNECTION_LIMIT = 100
# How long past its own timeout a long poll may take to answer before the connection counts as dead.
POLL_ANSWER_MARGIN_SECONDS = 10


class GetUpdatesAsJson(TelegramMethod[list[dict[str, Any]]]):
    """getUpdates answered with the Bot API's JSON as it came, not aiogram's `Update`s: the channel reads
    updates as JSON, and one update aiogram's types refuse (a Bot API server older or newer than aiogram)
    would fail the whole batch, and every poll after it, for good."""

    __returning__ = list[dict[str, Any]]
    __api_method__ = "getUpdates"

    offset: int | None = None
    limit: int | None = None
    timeout: int | None = None
    allowed_updates: list[str] | None = None


class AiogramBackend:
    """Bot API calls and long polling through aiogram."""

    name = "aiogram"

    def __init__(self, token: str, api_root: str) -> None:
        session = AiohttpSession(api=TelegramAPIServer.from_base(api_root.rstrip("/")), limit=CONNECTION_LIMIT)
        self._bot = Bot(token, session=session)

    async def connect(self) -> BotIdentity:
        me = await _translated(self._bot.get_me)
        return BotIdentity(id=me.id, username=me.username or "")

    async def close(self) -> None:
        await self._bot.session.close()

    async def delete_webhook(self) -> None:
        await _translated(lambda: self._bot.delete_webhook(drop_pending_updates=False))

    async def get_updates(
        self, offset: int | None, timeout_seconds: int, allowed_updates: list[str], limit: int = 100
    ) -> list[dict[str, Any]]:
        call = GetUpdatesAsJson(offset=offset, limit=limit, timeout=timeout_seconds, allowed_updates=allowed_updates)
        return await _translated(lambda: self._bot(call, request_timeout=timeout_seconds + POLL_ANSWER_MARGIN_SECONDS))

    async def set_webhook(self, url: str, secret: str, allowed_updates: list[str]) -> None:
        await _translated(lambda: self._bot.set_webhook(url, secret_token=secret, allowed_updates=allowed_updates))

    async def set_my_commands(self, commands: list[tuple[str, str]]) -> None:
        menu = [BotCommand(command=name, description=description) for name, description in commands]
        await _translated(lambda: self._bot.set_my_commands(menu))

    async def send_message(
        self, chat: TelegramChat, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> int:
        message = await _translated(
            lambda: self._bot.send_message(
                chat.id,
                text,
                message_thread_id=chat.thread_id,
                entities=_entities(entities),
                request_timeout=max(1, round(answer_timeout)),
            )
        )
        return int(message.message_id)

    async def send_document(
        self, chat: TelegramChat, file_name: str, data: bytes, caption: str | None, answer_timeout: float
    ) -> int:
        message = await _translated(
            lambda: self._bot.send_document(
                chat.id,
                BufferedInputFile(data, filename=file_name),
                message_thread_id=chat.thread_id,
                caption=caption,
                request_timeout=max(1, round(answer_timeout)),
            )
        )
        return int(message.message_id)

    async def edit_message_text(
        self, chat_id: int, message_id: int, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> None:
        await _translated(
            lambda: self._bot.edit_message_text(
                text=text,
                chat_id=chat_id,
                message_id=message_id,
                entities=_entities(entities),
                request_timeout=max(1, round(answer_timeout)),
            )
        )

    async def send_message_draft(
        self, chat_id: int, draft_id: int, text: str, entities: list[dict[str, object]] | None
    ) -> None:
        await _translated(
            lambda: self._bot.send_message_draft(chat_id, draft_id, text=text, entities=_entities(entities))
        )

    async def send_chat_action(self, chat: TelegramChat, action: str) -> None:
        await _translated(lambda: self._bot.send_chat_action(chat.id, action, message_thread_id=chat.thread_id))

    async def answer_callback_query(self, query_id: str, text: str | None) -> None:
        await _translated(lambda: self._bot.answer_callback_query(query_id, text=text))

    async def download_file(self, file_id: str) -> bytes:
        file = await _translated(lambda: self._bot.get_file(file_id))
        if not file.file_path:
            raise Refused("Telegram gave no path for the file")
        buffer = await _translated(lambda: self._bot.download_file(file.file_path or ""))
        return buffer.read() if buffer is not None else b""


def _entities(entities: list[dict[str, object]] | None) -> list[MessageEntity] | None:
    if not entities:
        return None
    return [MessageEntity.model_validate(entity) for entity in entities]


async def _translated(call: Callable[[], Awaitable[_T]]) -> _T:
    """Run an aiogram call, raising the channel's error classes instead of aiogram's."""
    try:
        return await call()
    except TelegramRetryAfter as error:
        raise RetryAfter(error.message, float(error.retry_after)) from error
    except TelegramMigrateToChat as error:
        raise ChatUpgraded(error.message, error.migrate_to_chat_id) from error
    except TelegramBadRequest as error:
        raise BadRequest(error.message) from error
    except TelegramServerError as error:
        raise Transient(error.message) from error
    except TelegramNetworkError as error:
        if isinstance(error.__cause__, TimeoutError):
            raise AnswerTimedOut(error.message) from error
        raise Transient(error.message) from error
    except ClientDecodeError as error:  # a proxy's HTML error page instead of Telegram's JSON
        raise Transient(str(error)) from error
    except AiogramError as error:  # forbidden, unauthorized, not found, conflict ...
        raise Refused(str(error)) from error

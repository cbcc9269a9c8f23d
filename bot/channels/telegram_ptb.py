"""`PtbBackend`: the Telegram channel over python-telegram-bot (`TELEGRAM_BACKEND=ptb`, the default).

Uses PTB's `Bot` for every call, getUpdates included, without an `Application` or `Updater`: the
channel's own polling loop (`telegram_polling`) acknowledges an update only once the turn ledger holds it, and
the channel's per-chat queues do what PTB's handlers and `concurrent_updates` would.
"""

from __future__ import annotations

import contextlib
import datetime as dtm
import functools
import logging
import ssl
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import telegram
from telegram.error import BadRequest as PtbBadRequest
from telegram.error import ChatMigrated, EndPointNotFound, InvalidToken, NetworkError, TelegramError, TimedOut
from telegram.error import RetryAfter as PtbRetryAfter
from telegram.request import HTTPXRequest

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
# Replies to many chats go out at once: PTB's default pool of one connection would queue them all. A bigger
# pool measured slower (httpcore looks at every pooled connection on each request).
CONNECTION_POOL_SIZE = 8
CONNECT_TIMEOUT_SECONDS = 10.0
_HAS_A_METHOD_OF_ITS_OWN = r"Please use 'Bot\.\w+' instead of 'Bot\.do_api_request"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings of the process's Bot API clients (httpx's defaults): reading the certificate bundle
    takes tens of milliseconds of CPU, once a process rather than once a client (a backend makes two)."""
    return httpx.create_ssl_context()


class PtbBackend:
    """Bot API calls and long polling through python-telegram-bot."""

    name = "ptb"

    def __init__(self, token: str, api_root: str) -> None:
        root = api_root.rstrip("/")
        tls = {"verify": _tls_context()}
        updates_request = HTTPXRequest(connect_timeout=CONNECT_TIMEOUT_SECONDS, httpx_kwargs=tls)
        self._poll_read_timeout = updates_request.read_timeout or 0.0
        self._bot = telegram.Bot(
            token,
            base_url=f"{root}/bot",
            base_file_url=f"{root}/file/bot",
            request=HTTPXRequest(
                connection_pool_size=CONNECTION_POOL_SIZE,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                pool_timeout=CONNECT_TIMEOUT_SECONDS,
                httpx_kwargs=tls,
            ),
            get_updates_request=updates_request,
        )

    async def connect(self) -> BotIdentity:
        await _translated(self._bot.initialize)
        return BotIdentity(id=self._bot.id, username=self._bot.username)

    async def close(self) -> None:
        with contextlib.suppress(TelegramError):
            await self._bot.shutdown()

    async def delete_webhook(self) -> None:
        await _translated(lambda: self._bot.delete_webhook(drop_pending_updates=False))

    async def get_updates(
        self, offset: int | None, timeout_seconds: int, allowed_updates: list[str], limit: int = 100
    ) -> list[dict[str, Any]]:
        arguments = {"offset": offset, "limit": limit, "timeout": timeout_seconds, "allowed_updates": allowed_updates}
        # A long poll waits `timeout` seconds for updates on top of the usual read timeout (as `Bot.get_updates`).
        return list(await self._as_json("getUpdates", arguments, self._poll_read_timeout + timeout_seconds))

    async def set_webhook(self, url: str, secret: str, allowed_updates: list[str]) -> None:
        await _translated(lambda: self._bot.set_webhook(url, secret_token=secret, allowed_updates=allowed_updates))

    async def set_my_commands(self, commands: list[tuple[str, str]]) -> None:
        await _translated(lambda: self._bot.set_my_commands(commands))

    async def send_message(
        self, chat: TelegramChat, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> int:
        arguments = {
            "chat_id": chat.id,
            "message_thread_id": chat.thread_id,
            "text": text,
            "entities": entities or None,
        }
        message = await self._as_json("sendMessage", arguments, answer_timeout)
        return int(message["message_id"])

    async def send_document(
        self, chat: TelegramChat, file_name: str, data: bytes, caption: str | None, answer_timeout: float
    ) -> int:
        message = await _translated(
            lambda: self._bot.send_document(
                chat.id,
                telegram.InputFile(data, filename=file_name),
                caption=caption,
                message_thread_id=chat.thread_id,
                read_timeout=answer_timeout,
                write_timeout=answer_timeout,
            )
        )
        return message.message_id

    async def edit_message_text(
        self, chat_id: int, message_id: int, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> None:
        arguments = {"chat_id": chat_id, "message_id": message_id, "text": text, "entities": entities or None}
        await self._as_json("editMessageText", arguments, answer_timeout)

    async def send_message_draft(
        self, chat_id: int, draft_id: int, text: str, entities: list[dict[str, object]] | None
    ) -> None:
        await _translated(lambda: self._bot.send_message_draft(chat_id, draft_id, text, entities=_entities(entities)))

    async def send_chat_action(self, chat: TelegramChat, action: str) -> None:
        await _translated(lambda: self._bot.send_chat_action(chat.id, action, message_thread_id=chat.thread_id))

    async def answer_callback_query(self, query_id: str, text: str | None) -> None:
        await _translated(lambda: self._bot.answer_callback_query(query_id, text=text))

    async def _as_json(self, method: str, arguments: dict[str, Any], seconds: float) -> Any:
        """A Bot API call through `do_api_request`, answered with the API's JSON as it came (`seconds` to send
        the request and to read its answer): the channel reads updates and sent messages as JSON, and
        building PTB's objects only to turn them back (an `Update` into a dict, a sent `Message` for its id)
        costs more than the call's own work. PTB warns that it has a method of its own
        for each: known, and ignored."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_HAS_A_METHOD_OF_ITS_OWN)
            return await _translated(
                lambda: self._bot.do_api_request(
                    method, api_kwargs=arguments, read_timeout=seconds, write_timeout=seconds
                )
            )

    async def download_file(self, file_id: str) -> bytes:
        file = await _translated(lambda: self._bot.get_file(file_id))
        return bytes(await _translated(file.download_as_bytearray))


def _entities(entities: list[dict[str, object]] | None) -> list[telegram.MessageEntity] | None:
    if not entities:
        return None
    return [telegram.MessageEntity(**entity) for entity in entities]  # type: ignore[arg-type]


async def _translated(call: Callable[[], Awaitable[_T]]) -> _T:
    """Run a PTB call, raising the channel's error classes instead of PTB's."""
    try:
        return await call()
    except PtbRetryAfter as error:
        raise RetryAfter(str(error), _seconds(error)) from error
    except TimedOut as error:
        # Waiting for a connection or for the connect is before anything was sent.
        if isinstance(error.__cause__, httpx.ConnectTimeout | httpx.PoolTimeout):
            raise Transient(str(error)) from error
        raise AnswerTimedOut(str(error)) from error
    except PtbBadRequest as error:
        raise BadRequest(error.message) from error
    except ChatMigrated as error:
        raise ChatUpgraded(error.message, error.new_chat_id) from error
    except NetworkError as error:  # 5xx answers and failed connections
        raise Transient(str(error)) from error
    # PTB's message quotes the token itself. Through `do_api_request` a rejected token shows as an
    # endpoint not found (the Bot API answers 404 to both); the endpoints the channel asks for exist.
    except (InvalidToken, EndPointNotFound) as error:
        raise Refused("Unauthorized: the bot token was rejected") from error
    except TelegramError as error:  # Forbidden, Conflict, ChatMigrated ...
        raise Refused(str(error)) from error


def _seconds(error: PtbRetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PTB warns that `retry_after` becomes a timedelta
        value: Any = error.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)

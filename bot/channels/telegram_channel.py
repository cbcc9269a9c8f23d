"""`TelegramChannel`: Telegram as a `Channel`, over either client library (`TelegramBackend`).

Receiving: long polling (`LongPolling`, which acknowledges an update only once the turn ledger holds
it), or the webhook route on the bot's `HttpListener` (the secret is checked on every request: a wrong or
missing one gets 401 and nothing is processed; the answer, which acknowledges the update, waits for the
ledger too). The ledger says whether an update id was handed over before (a redelivery after a crash is
dropped); a new one is turned into an `InboundMessage` (`telegram_updates`) and handed to the handler,
which records it received and queues it: the per-chat queues behind the handler keep each chat in order
and run chats concurrently, so this side never waits for a reply.

Sending: `TelegramDelivery` (formatting, splitting, retries), and `TelegramReplyStream` for replies
shown while they are written. A chat id names a chat or one topic of a forum supergroup
(`bot.domain.session.topic_chat_id`): every send to it goes to that topic (`TelegramChat`). A send the
chat refuses goes where `ChatRedirects` says instead (the supergroup a group became, the General topic of
a topic closed or deleted). The slash commands are registered with setMyCommands at start.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aiohttp import web

from bot.channels.base import Channel, ChatUnreachable, FileUnavailable, InboundHandler
from bot.channels.telegram_albums import Albums
from bot.channels.telegram_api import TelegramApiError, TelegramBackend, TelegramChat, shuts_the_bot_out
from bot.channels.telegram_delivery import DeliveryFailed, TelegramDelivery, call_with_retries
from bot.channels.telegram_polling import LongPolling
from bot.channels.telegram_redirects import ChatRedirects, SendIn, led_by
from bot.channels.telegram_stream import TelegramReplyStream
from bot.channels.telegram_updates import (
    ALLOWED_UPDATES,
    CHANNEL_TYPE,
    BotIdentity,
    album_key,
    chat_move_from_update,
    inbound_from_update,
    named_topic,
)
from bot.clock import Clock
from bot.domain.chat_move import ChatMove
from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream
from bot.http.listener import HttpListener
from bot.ledger.turns import TurnLedger
from bot.settings import RuntimeConfig

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_URL = re.compile(r"\b\w+://\S+")
STALE_BUTTON_TEXT = "This button is no longer active."

_T = TypeVar("_T")


class TelegramStartError(RuntimeError):
    """The bot could not start on Telegram (a wrong token, Telegram unreachable); the message says which."""


@dataclass(frozen=True)
class WebhookSetup:
    """Webhook mode: the public URL Telegram posts to, the secret it sends, the listener serving it."""

    url: str
    secret: str
    listener: HttpListener

    @property
    def path(self) -> str:
        return urlsplit(self.url).path or "/"


class TelegramChannel(Channel):
    """A Telegram bot: receives updates, answers in the chats they came from."""

    channel_type = CHANNEL_TYPE

    def __init__(
        self,
        backend: TelegramBackend,
        config: Callable[[], RuntimeConfig],
        commands: list[tuple[str, str]],
        ledger: TurnLedger,
        webhook: WebhookSetup | None = None,
        clock: Clock | None = None,
        poller_lease: Callable[[], AbstractAsyncContextManager[Callable[[], Awaitable[bool]]]] | None = None,
    ) -> None:
        """`config` gives the runtime-config in force; `webhook` None means long polling; `clock` times the
        live updates of streamed replies; `poller_lease` (processes sharing a database) is held while polling."""
        self._backend = backend
        self.clock = clock or Clock()
        self._config = config
        self._commands = commands
        self._ledger = ledger
        self._webhook = webhook
        self._poller_lease = poller_lease
        self._delivery = TelegramDelivery(backend)
        self._handler: InboundHandler | None = None
        self._identity: BotIdentity | None = None
        self._receiving = False
        self._polling: LongPolling | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._redirects = ChatRedirects(self._upgraded_to)
        self._albums = Albums(self._forgotten)
        # Timers that forget the photos of an album held in case it names the bot, once the wait is over.
        self._album_timers: set[asyncio.Task[None]] = set()
        if webhook is not None:
            webhook.listener.add_route("POST", webhook.path, self._on_webhook)

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        config = self._config().telegram
        try:
            self._identity = await call_with_retries(self._backend.connect, config, "getMe")
        except DeliveryFailed as error:
            raise TelegramStartError(f"Telegram refused or could not be reached: {error}") from error
        await self._register_commands()
        self._hold_again()
        self._receiving = True
        webhook = self._webhook
        if webhook is not None:
            try:
                await call_with_retries(
                    lambda: self._backend.set_webhook(webhook.url, webhook.secret, ALLOWED_UPDATES),
                    config,
                    "setWebhook",
                )
            except DeliveryFailed as error:
                raise TelegramStartError(f"Telegram did not take the webhook: {error}") from error
            log.info("[Telegram] @%s receiving by webhook (%s)", self._identity.username, self._backend.name)
        else:
            self._polling = LongPolling(
                self._backend,
                self._on_update,
                self._ledger.flush,
                lambda: self._config().telegram.polling_timeout_seconds,
                ALLOWED_UPDATES,
                self._poller_lease,
            )
            self._polling.start()
            if self._poller_lease is None:
                log.info("[Telegram] @%s polling (%s)", self._identity.username, self._backend.name)
            else:
                # Not polling yet: the poller lease says when (its holder logs that it holds it).
                log.info(
                    "[Telegram] @%s standing by to poll (%s): one process polls at a time, the one holding the "
                    "poller lease",
                    self._identity.username,
                    self._backend.name,
                )

    @property
    def receiving(self) -> bool:
        return self._receiving

    async def _register_commands(self) -> None:
        try:
            await call_with_retries(
                lambda: self._backend.set_my_commands(self._commands),
                self._config().telegram,
                "setMyCommands",
            )
        except DeliveryFailed as error:
            # The commands still work when typed; only Telegram's menu lacks them.
            log.warning("[Telegram] Could not register the command menu: %s", error)

    async def stop_receiving(self) -> None:
        if self._polling is not None:
            # A batch being handed over is finished, saved and acknowledged before polling stops.
            await self._polling.stop()
            self._polling = None
        self._receiving = False

    async def stop(self) -> None:
        await self.stop_receiving()
        for timer in list(self._album_timers):
            timer.cancel()  # what is still held stays in the ledger, held again by the next start
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self._backend.close()

    # Receiving.

    async def _on_update(self, update: dict[str, Any]) -> None:
        """Hand one update over; returns once it is queued (never waits for the reply)."""
        handler, identity = self._handler, self._identity
        if not self._receiving or handler is None or identity is None:
            return
        update_id = update.get("update_id")
        if isinstance(update_id, int) and not await self._ledger.claim(CHANNEL_TYPE, str(update_id)):
            log.info("[Telegram] Update %d was delivered again; already handled", update_id)
            return
        await self._hand_over(update, handler, identity)
        if isinstance(update_id, int):
            self._ledger.handed_over(CHANNEL_TYPE, str(update_id))

    async def _hand_over(self, update: dict[str, Any], handler: InboundHandler, identity: BotIdentity) -> None:
        """Turn the update into a message and give it to `handler` (which records it); a button press is answered.
        The messages of an album are handed over one at a time, and in a group once the album addresses the bot
        (`Albums`)."""
        query = update.get("callback_query")
        if isinstance(query, dict):
            # The bot sends no buttons of its own: any press is stale. Answer it so the spinner stops.
            self._in_background(self._answer_callback(str(query.get("id", ""))))
            return
        move = chat_move_from_update(update)
        if move is not None:
            await self._chat_moved(move)
            return
        topic = named_topic(update)
        if topic is not None:
            self._redirects.topic_named(topic)
        config = self._config()
        album = album_key(update)
        if album is None:
            await self._handed(handler, self._inbound(update, identity, config, album_addressed=False), update)
            return
        async with self._albums.handing_over:
            addressed = self._albums.addressed(album)
            inbound = self._inbound(update, identity, config, album_addressed=addressed)
            if not addressed:
                now, wait = self.clock.monotonic(), config.media.album_wait_seconds
                if inbound is None:
                    self._hold(album, update, now, wait)
                    return
                # The album's first message for the bot: its messages that came before (not addressed to the
                # bot in a group) are for the bot too, and handed over first, in their order.
                for held in self._albums.address(album, now, wait):
                    await self._handed(handler, self._inbound(held, identity, config, album_addressed=True), held)
                    self._ledger.release(CHANNEL_TYPE, str(held.get("update_id")))
            await self._handed(handler, inbound, update)

    def _hold(self, album: str, update: dict[str, Any], now: float, wait: float) -> None:
        """Hold a photo of an album not (yet) addressed to the bot, in the ledger too: its update is acknowledged
        with the others, and a stop or crash before the album is decided must not lose it."""
        self._albums.hold(album, update, now, wait)
        self._ledger.hold(CHANNEL_TYPE, str(update.get("update_id")), update)
        self._forget_held_after(wait)

    def _hold_again(self) -> None:
        """The album photos held when the last process stopped wait again, from now, for the photo naming the bot
        (it comes with the first updates, which were not acknowledged)."""
        wait, now = self._config().media.album_wait_seconds, self.clock.monotonic()
        held = self._ledger.held(CHANNEL_TYPE)
        for update in held:
            album = album_key(update)
            if album is None:
                self._ledger.release(CHANNEL_TYPE, str(update.get("update_id")))
                continue
            self._albums.hold(album, update, now, wait)
            log.info("[Telegram] A photo of an album held at the last stop waits again for the photo naming the bot")
        if held:
            self._forget_held_after(wait)

    def _forget_held_after(self, wait: float) -> None:
        """Forget the held photos whose wait is over by then, so the ledger lets them go without another album."""

        async def forget() -> None:
            await self.clock.sleep(wait)
            async with self._albums.handing_over:
                self._albums.forget_older(self.clock.monotonic() - wait)

        timer = asyncio.create_task(forget(), name="album wait")
        self._album_timers.add(timer)
        timer.add_done_callback(self._album_timers.discard)

    def _forgotten(self, update: dict[str, Any]) -> None:
        """A held photo whose album did not name the bot in time: dropped, from the ledger too."""
        self._ledger.release(CHANNEL_TYPE, str(update.get("update_id")))

    def _inbound(
        self, update: dict[str, Any], identity: BotIdentity, config: RuntimeConfig, *, album_addressed: bool
    ) -> InboundMessage | None:
        return inbound_from_update(
            update, identity, config.telegram.groups, config.media.max_image_pixels, album_addressed=album_addressed
        )

    async def _handed(self, handler: InboundHandler, inbound: InboundMessage | None, update: dict[str, Any]) -> None:
        if inbound is None:
            return
        try:
            await handler(inbound)
        except Exception:
            log.exception("[Telegram] Handing over update %s failed", update.get("update_id"))

    async def _on_webhook(self, request: web.Request) -> web.StreamResponse:
        assert self._webhook is not None
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self._webhook.secret.encode()):
            log.warning("[Telegram] Webhook request with a wrong or missing secret refused")
            return web.Response(status=401, text="unauthorized")
        if not self._receiving:
            return web.Response(status=503, text="stopping")  # Telegram delivers it again later
        try:
            update = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.Response(status=400, text="not JSON")
        if not isinstance(update, dict):
            return web.Response(status=400, text="not an update")
        await self._on_update(update)
        await self._ledger.flush()  # the answer acknowledges the update: what was seen is on disk first
        return web.Response(text="ok")

    async def _answer_callback(self, query_id: str) -> None:
        try:
            await self._backend.answer_callback_query(query_id, STALE_BUTTON_TEXT)
        except TelegramApiError as error:
            log.info("[Telegram] Could not answer a button press: %s", error)

    def _in_background(self, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _chat_moved(self, move: ChatMove) -> None:
        """A group upgraded to a supergroup: sends to it go to the new id, and the wiring moves its data."""
        self._redirects.upgraded(int(move.old_chat_id), int(move.new_chat_id))
        if self.chat_moved is None:
            return
        try:
            await self.chat_moved(move)
        except Exception:
            log.exception("[Telegram] Moving the chat %s failed", move)

    # Sending.

    async def _in_chat(self, chat_id: str, call: SendIn[_T]) -> _T:
        """`call` made in the chat, or where its sends go when it refuses them (`ChatRedirects`); a chat that
        takes no message from the bot raises `ChatUnreachable`."""
        try:
            return await self._redirects.send(self._redirects.chat(chat_id), call)
        except DeliveryFailed as failure:
            refusal = failure.__cause__
            if isinstance(refusal, TelegramApiError) and shuts_the_bot_out(refusal):
                raise ChatUnreachable(refusal.description) from failure
            raise

    async def send_text(self, chat_id: str, text: str) -> str | None:
        config = self._config().telegram
        message_id = await self._in_chat(
            chat_id, lambda chat, note: self._delivery.send(chat, led_by(note, text), config)
        )
        return None if message_id is None else str(message_id)

    async def edit_text(self, chat_id: str, message_id: str, text: str) -> None:
        # Never in a supergroup the group became: the message is the old group's, and an id of the new one
        # would name another message.
        await self._delivery.edit(TelegramChat.of(chat_id).id, int(message_id), text, self._config().telegram)

    async def send_file(self, chat_id: str, file_name: str, data: bytes, caption: str | None = None) -> bool:
        config = self._config().telegram

        async def send(chat: TelegramChat, note: str | None) -> int:
            captioned = led_by(note, caption or "") or None
            return await call_with_retries(
                lambda: self._backend.send_document(chat, file_name, data, captioned, config.send_timeout_seconds),
                config,
                "sendDocument",
            )

        await self._in_chat(chat_id, send)
        return True

    def open_stream(self, chat_id: str) -> ReplyStream | None:
        return TelegramReplyStream(
            self._delivery, self._redirects.chat(chat_id), self._config, self.clock, self._redirects
        )

    async def _upgraded_to(self, old_chat_id: int, new_chat_id: int) -> None:
        await self._chat_moved(ChatMove(CHANNEL_TYPE, str(old_chat_id), str(new_chat_id)))

    async def download(self, file_id: str) -> bytes:
        try:
            return await call_with_retries(
                lambda: self._backend.download_file(file_id), self._config().telegram, "getFile"
            )
        except DeliveryFailed as error:
            if "too big" in str(error).lower():
                raise FileUnavailable("Telegram lets bots download files of at most 20 MB") from error
            # A transport error may quote the file URL, which holds the token: never in a reply.
            reason = _URL.sub("[file URL]", str(error))
            raise FileUnavailable(f"Telegram did not give me the file ({reason})") from error

    async def send_typing(self, chat_id: str) -> None:
        async def indicate(chat: TelegramChat, note: str | None) -> None:
            # One try in each place: a missed indicator is harmless, and retrying it would only delay the reply.
            try:
                await self._backend.send_chat_action(chat, "typing")
            except TelegramApiError as error:
                raise DeliveryFailed(f"sendChatAction: {error.description}") from error

        # Shown where the reply will go: in the General topic of a topic closed or deleted.
        await self._in_chat(chat_id, indicate)

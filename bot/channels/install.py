"""What the channels package gives the rest of the bot: the channels the environment configures
(Telegram when `TELEGRAM_BOT_TOKEN` is set; the terminal's `ConsoleChannel` is made by `bot chat`)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from bot.channels.base import Channel
from bot.channels.telegram_api import TelegramBackend
from bot.channels.telegram_channel import TelegramChannel, WebhookSetup
from bot.http.listener import HttpListener
from bot.ledger.turns import TurnLedger
from bot.settings import EnvSettings, RuntimeConfig

log = logging.getLogger(__name__)


def install(
    env: EnvSettings,
    config: Callable[[], RuntimeConfig],
    commands: list[tuple[str, str]],
    ledger: TurnLedger,
    listener: HttpListener | None,
    poller_lease: Callable[[], AbstractAsyncContextManager[Callable[[], Awaitable[bool]]]] | None = None,
) -> list[Channel]:
    """The configured channels, not started; `commands` (name, description) is the menu Telegram shows;
    `ledger` tells the channel which updates it has seen (and is flushed before they are acknowledged);
    `poller_lease`, given when processes share a database, lets one of them poll at a time."""
    if env.telegram_bot_token is None:
        log.warning(
            "[App] No channel configured: set TELEGRAM_BOT_TOKEN (in the environment or a .env file in the "
            "working directory) to enable Telegram, or talk to the bot in this terminal with `python -m bot chat`"
        )
        return []
    token = env.telegram_bot_token.get_secret_value()
    webhook = None
    if env.telegram_mode == "webhook":
        if not env.telegram_webhook_url or listener is None:
            raise SystemExit("TELEGRAM_MODE=webhook needs TELEGRAM_WEBHOOK_URL (and the HTTP listener)")
        # Without a configured secret a random one is registered: every request is still checked.
        secret = env.telegram_webhook_secret.get_secret_value() if env.telegram_webhook_secret else None
        webhook = WebhookSetup(env.telegram_webhook_url, secret or secrets.token_urlsafe(32), listener)
    backend = telegram_backend(env.telegram_backend, token, env.telegram_api_base_url)
    return [TelegramChannel(backend, config, commands, ledger, webhook, poller_lease=poller_lease)]


def telegram_backend(name: str, token: str, api_root: str) -> TelegramBackend:
    """The Bot API client of `TELEGRAM_BACKEND` (`ptb` unless `aiogram`)."""
    # Imported here so a process loads only the client library it uses.
    if name == "aiogram":
        from bot.channels.telegram_aiogram import AiogramBackend

        return AiogramBackend(token, api_root)
    from bot.channels.telegram_ptb import PtbBackend

    return PtbBackend(token, api_root)

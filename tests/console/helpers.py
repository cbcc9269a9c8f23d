"""A bot with its HTTP listener on the fakes, and the console's login link as the bot sends it on Telegram."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp

from tests.channels.telegram_harness import RunningBot, free_port, start_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

LINK = re.compile(r"(http://127\.0\.0\.1:\d+/console/login\?token=[0-9a-f]+)")


async def start_console_bot(
    workspace: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    runtime_config: dict[str, Any] | None = None,
    **env: object,
) -> RunningBot:
    """The bot as `python -m bot run` starts it with `BOT_LISTEN_PORT` set (the listener on 127.0.0.1), and
    with `env`'s other variables."""
    return await start_bot(
        workspace, fake_openai, fake_telegram, "ptb", runtime_config, bot_listen_port=free_port(), **env
    )


async def say(fake_telegram: FakeTelegram, chat_id: int, text: str) -> str:
    """Write `text` in a private chat and return the bot's next message there."""
    before = len(fake_telegram.sent_messages(chat_id))
    fake_telegram.push_message(chat_id, text)
    sent = await fake_telegram.await_messages(chat_id, before + 1)
    return sent[before].text


async def login_link(fake_telegram: FakeTelegram, chat_id: int) -> str:
    """Send `/console` in a private chat and return the link the bot answers with."""
    reply = await say(fake_telegram, chat_id, "/console")
    found = LINK.search(reply)
    assert found, reply
    return found.group(1)


def token_of(link: str) -> str:
    return link.rsplit("=", 1)[1]


def root_of(link: str) -> str:
    """The listener's root (`http://127.0.0.1:port`) a link points at."""
    return link.split("/console/", 1)[0]


async def log_in(client: aiohttp.ClientSession, link: str) -> aiohttp.ClientResponse:
    """Open the link as a browser does (its page, then the form it sends); the login's response, not followed."""
    async with client.get(link) as opened:
        assert opened.status == 200
        assert 'id="login"' in await opened.text()
    return await client.post(f"{root_of(link)}/console/login", data={"token": token_of(link)}, allow_redirects=False)


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def new_client() -> aiohttp.ClientSession:
    """A client that keeps the console's cookie (set for 127.0.0.1, which aiohttp's jar refuses by default)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def page_showing(client: aiohttp.ClientSession, url: str, text: str, seconds: float = 20.0) -> str:
    """The page at `url` once it shows `text` (a turn's trace is kept just after its reply reached the chat)."""
    for _ in range(int(seconds / 0.05)):
        async with client.get(url) as page:
            body = await page.text()
        if text in body:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never showed {text!r}: {body}")

"""The Bot API server down for a while: the bot backs off instead of hammering it, and once it is back
answers what was written meanwhile, once each and in order, within one backoff step.

The suite takes the server down for 5 seconds; `pytest -m long` (or BOT_LONG_TESTS=1) for a minute,
long enough for the backoff to reach its cap.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from bot.channels.telegram_polling import FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS
from tests.channels.telegram_harness import GROUP_MEMBER, OWNER, start_bot
from tests.fakes.bot_fixtures import BACKENDS
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, Fault

SLACK_SECONDS = 5.0  # a loaded machine's scheduling, on top of the backoff


def attempts_allowed(seconds: float) -> int:
    """How many getUpdates a doubling backoff from FIRST_BACKOFF_SECONDS makes in `seconds` (plus slack)."""
    attempts, elapsed, backoff = 1, 0.0, FIRST_BACKOFF_SECONDS
    while elapsed + backoff <= seconds:
        elapsed += backoff
        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
        attempts += 1
    return attempts + 2


async def outage(
    workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str, seconds: float
) -> None:
    bot = await start_bot(workspace, fake_openai, fake_telegram, backend)
    try:
        await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("getUpdates")))
        polls_before = len(fake_telegram.calls_to("getUpdates"))
        fake_telegram.go_down(Fault.server_error(502, html_body=True))
        for text in ("one", "two", "three"):
            fake_telegram.push_message(OWNER, text)
            fake_telegram.push_message(GROUP_MEMBER, text)
        await asyncio.sleep(seconds)
        polls_down = len(fake_telegram.calls_to("getUpdates")) - polls_before
        fake_telegram.come_up()
        back = time.monotonic()
        await fake_telegram.await_messages(OWNER, 3, timeout=MAX_BACKOFF_SECONDS + SLACK_SECONDS)
        await fake_telegram.await_messages(GROUP_MEMBER, 3, timeout=SLACK_SECONDS)
        recovered_in = time.monotonic() - back
        # Every update acknowledged: Telegram has nothing to deliver again; the stop then lets every reply
        # begun go out, so a reply sent twice is among what is checked below.
        await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0)
    finally:
        await bot.stop()
    for chat in (OWNER, GROUP_MEMBER):
        assert fake_telegram.visible_text(chat) == ["echo: one", "echo: two", "echo: three"]
        assert len(fake_telegram.sent_messages(chat)) == 3
    assert polls_down <= attempts_allowed(seconds), f"{polls_down} getUpdates in {seconds:.0f} s of outage"
    assert recovered_in <= min(MAX_BACKOFF_SECONDS, 2 * seconds) + SLACK_SECONDS


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_short_outage_is_waited_out(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    await outage(workspace_dir, fake_openai, fake_telegram, backend, seconds=5.0)


@pytest.mark.long
@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_bot_api_down_for_a_minute_is_waited_out(
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    if os.environ.get("BOT_LONG_TESTS") != "1" and "long" not in (request.config.option.markexpr or ""):
        pytest.skip("the one-minute outage runs with `pytest -m long` or BOT_LONG_TESTS=1")
    await outage(workspace_dir, fake_openai, fake_telegram, backend, seconds=60.0)

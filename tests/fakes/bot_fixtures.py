"""Fixtures for end-to-end tests through Telegram: `backend` runs a test once per Telegram backend,
`start` starts the bot (with extra runtime-config) on the fake model and the fake Bot API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

if TYPE_CHECKING:  # the harness imports the application: see tests/conftest.py
    from tests.channels.telegram_harness import RunningBot

BotFactory = Callable[..., Any]
BACKENDS = ["ptb", "aiogram"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def start(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> AsyncIterator[BotFactory]:
    """Starts the bot (with extra runtime-config) on the fakes; stopped at the end of the test."""
    from tests.channels.telegram_harness import start_bot

    running: list[RunningBot] = []

    async def factory(runtime_config: dict[str, Any] | None = None) -> RunningBot:
        bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, runtime_config)
        running.append(bot)
        return bot

    yield factory
    for bot in running:
        await bot.stop()

"""Fixtures for the Telegram channel tests: each end-to-end test runs once per backend (the `backend`
fixture of `tests/fakes/bot_fixtures.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.channels.telegram_harness import RunningBot, start_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
async def bot(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> AsyncIterator[RunningBot]:
    """The bot polling the fake Telegram with the test runtime-config (see `telegram_harness`)."""
    running = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    yield running
    await running.stop()

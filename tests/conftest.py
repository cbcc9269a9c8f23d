"""Shared fixtures: the fake model and the fake Telegram Bot API server run on 127.0.0.1,
and a bot wired exactly as `python -m bot` wires it, on a temporary workspace."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.settings import EnvSettings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

pytest_plugins = [
    "tests.fakes.openai_fixtures",
    "tests.fakes.telegram_fixtures",
    "tests.fakes.bot_fixtures",
    "tests.postgres_server",
]

TEST_API_KEY = "sk-test-key-1234567890"


def env_for(workspace: Path, fake_openai: FakeOpenAI, **overrides: Any) -> EnvSettings:
    """Settings as the environment would give them, pointing at the fakes; no `.env` is read."""
    values: dict[str, Any] = {
        "bot_workspace": workspace,
        "openai_base_url": fake_openai.base_url,
        "openai_api_key": TEST_API_KEY,
        "bot_timezone": "UTC",
    }
    values.update(overrides)
    return EnvSettings(_env_file=None, **values)


@pytest.fixture(autouse=True)
def unfrozen_heap() -> Iterator[None]:
    """Each test's objects become garbage again when it ends.

    A bot that has loaded much freezes what is alive (`bot.heap.settle_after_load`): in the one process of
    `python -m bot` that lives as long as the bot. A test process builds a bot per test, so what a test
    froze would stay until the process ends, every test adding its own, and the next freeze's collection
    frees it only once it is unfrozen.
    """
    yield
    gc.unfreeze()


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
async def services(workspace_dir: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Application]:
    built = Application(env_for(workspace_dir, fake_openai))
    yield built
    await built.stop()


@pytest.fixture
def channel() -> RecordingChannel:
    return RecordingChannel()

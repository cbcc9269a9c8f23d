"""Shared fixtures: the fake model and the fake Telegram Bot API server run on 127.0.0.1,
and a bot wired exactly as `python -m bot` wires it, on a temporary workspace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.settings import EnvSettings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

pytest_plugins = ["tests.fakes.openai_fixtures", "tests.fakes.telegram_fixtures", "tests.fakes.bot_fixtures"]

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

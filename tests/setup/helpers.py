"""The setup commands run as a person runs them: real processes, with the fake Bot API and the fake model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


def setup_env(workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, **extra: str) -> dict[str, str]:
    """The environment of a working setup against the fakes; `extra` changes or adds variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace),
        OPENAI_BASE_URL=fake_openai.base_url,
        OPENAI_API_KEY=TEST_API_KEY,
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_BASE_URL=fake_telegram.root,
        BOT_TIMEZONE="UTC",
    )
    env.update(extra)
    return {key: value for key, value in env.items() if value != ""}


def run_command(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip

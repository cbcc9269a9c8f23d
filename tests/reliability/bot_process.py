"""The real bot process (`python -m bot run`) against the fake Telegram and the fake model.

The reliability tests drive the bot as a user and an operator would: messages through the fake Bot API,
signals to the process, files left in the workspace afterwards. Each bot is forked with the application
already imported (`tests.bot_processes`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests import bot_processes
from tests.bot_processes import BotProcess
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

BAD_LOG_LINE = re.compile(r"Traceback|\b(ERROR|CRITICAL)\b")


def start_bot(
    workspace: Path,
    backend: str,
    model: FakeOpenAI,
    telegram: FakeTelegram,
    log: Path,
    runtime_config: dict[str, Any],
    extra_env: dict[str, str] | None = None,
) -> BotProcess:
    """Start the bot with `runtime_config` written to the workspace (and `extra_env` in its environment, such
    as `BOT_DATABASE_URL`); its stderr is appended to `log`."""
    config_file = workspace / "preferences" / "runtime-config.json"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps(runtime_config))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace), BOT_TIMEZONE="UTC", OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY=TEST_API_KEY,
        TELEGRAM_BOT_TOKEN=telegram.token, TELEGRAM_API_BASE_URL=telegram.root, TELEGRAM_BACKEND=backend,
    )  # fmt: skip
    env.update(extra_env or {})
    return bot_processes.start(["run"], env, stderr=log)


def stop(process: BotProcess, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if the bot is still there after `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def bad_log_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if BAD_LOG_LINE.search(line)]

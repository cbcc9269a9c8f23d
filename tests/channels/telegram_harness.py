"""A bot wired exactly as `python -m bot run` wires it, talking to the fake Telegram and the fake model.

`start_bot` writes the workspace's runtime-config (short long polls, quick retries, the allowed users),
builds the `Application` with its configured Telegram channel (and the HTTP listener), and starts it.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.channels.base import Channel
from bot.http.listener import HttpListener
from bot.runtime_config import deep_merge
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

OWNER = 4242  # a private chat's id is its user's id
GROUP = -1001234567
GROUP_MEMBER = 1001  # the fake's default sender in groups
WEBHOOK_SECRET = "s3cret-Token_1"

TEST_RUNTIME_CONFIG: dict[str, Any] = {
    "access": {"allowedUsers": [OWNER, GROUP_MEMBER]},
    "telegram": {"pollingTimeoutSeconds": 1, "retryBackoffSeconds": 0.05, "deliveryAttempts": 4},
    # Replies are streamed, but a test sees only the final text unless it asks for live updates.
    "toolLoop": {"streamEditIntervalSeconds": 30},
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RunningBot:
    """The bot under test, with what the tests look at."""

    app: Application
    workspace: Path

    @property
    def listener(self) -> HttpListener | None:
        return self.app.listener

    async def stop(self) -> None:
        await self.app.stop()

    def session_files(self) -> list[Path]:
        return sorted(path for path in (self.workspace / "sessions").rglob("*") if path.is_file())


def telegram_channel_alone(
    workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str, token: str | None = None
) -> Channel:
    """The Telegram channel as `python -m bot run` builds it, not started, for a test's own handler."""
    settings = env_for(
        workspace,
        fake_openai,
        telegram_bot_token=token or fake_telegram.token,
        telegram_api_base_url=fake_telegram.root,
        telegram_backend=backend,
    )
    [channel] = Application(settings).configured_channels()
    return channel


async def start_bot(
    workspace: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    backend: str,
    runtime_config: dict[str, Any] | None = None,
    **env: object,
) -> RunningBot:
    config_file = workspace / "preferences" / "runtime-config.json"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps(deep_merge(TEST_RUNTIME_CONFIG, runtime_config or {})))
    settings = env_for(
        workspace,
        fake_openai,
        telegram_bot_token=fake_telegram.token,
        telegram_api_base_url=fake_telegram.root,
        telegram_backend=backend,
        **env,
    )
    app = Application(settings)
    app.add_channels(app.configured_channels())
    running = RunningBot(app, workspace)
    try:
        await app.start()
    except BaseException:
        await running.stop()
        raise
    return running


async def start_webhook_bot(
    workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> RunningBot:
    port = free_port()
    return await start_bot(
        workspace,
        fake_openai,
        fake_telegram,
        backend,
        telegram_mode="webhook",
        telegram_webhook_url=f"http://127.0.0.1:{port}/telegram/webhook",
        telegram_webhook_secret=WEBHOOK_SECRET,
        bot_listen_port=port,
    )

"""A bot wired exactly as `python -m bot run` wires it, talking to the fake Telegram and the fake model.

`start_bot` writes the workspace's runtime-config (short long polls, quick retries, the allowed users),
builds services, the HTTP listener and the Telegram channel with `bot.app`, and starts them.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.app import BotServices, build_channels, build_listener, build_services, shutdown, start
from bot.channels.base import Channel
from bot.http.listener import HttpListener
from bot.runtime_config import deep_merge
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

BACKENDS = ["ptb", "aiogram"]
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

    services: BotServices
    channels: list[Channel]
    listener: HttpListener | None
    workspace: Path
    stopped: bool = field(default=False)

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await shutdown(self.services, self.channels, self.listener)

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
    [channel] = build_channels(settings, build_services(settings))
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
    services = build_services(settings)
    channels: list[Channel] = []
    listener = build_listener(settings, services, lambda: channels)
    channels.extend(build_channels(settings, services, listener))
    running = RunningBot(services, channels, listener, workspace)
    try:
        await start(services, channels, listener)
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

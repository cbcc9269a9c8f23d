"""`bot run` processes sharing one database, each behind a webhook port of its own (replicas), or polling
(one at a time): started, waited for, and posted updates as a load balancer sends them (the tests and
`bench.replicas`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bot.runtime_config import deep_merge
from tests import bot_processes
from tests.bot_processes import BotProcess
from tests.channels.telegram_harness import TEST_RUNTIME_CONFIG, WEBHOOK_SECRET, free_port
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.test_cli import bot_env

START_SECONDS = 60.0


@dataclass
class Replica:
    process: BotProcess
    port: int
    log: Path
    database_url: str

    @property
    def webhook(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/webhook"


def start_replica(
    workspace: Path,
    database_url: str,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    users: list[int],
    *,
    polling: bool = False,
    runtime_config: dict[str, Any] | None = None,
    environment: dict[str, str] | None = None,
) -> Replica:
    """A `bot run` on `workspace` and the database, admitting `users`: in webhook mode on a free port, or
    polling (`polling`) with its `/healthz` on that port; `environment` is set too."""
    port = free_port()
    config = deep_merge(dict(TEST_RUNTIME_CONFIG, access={"allowedUsers": users}), runtime_config or {})
    (workspace / "preferences").mkdir(parents=True, exist_ok=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))
    mode: dict[str, str] = (
        {"TELEGRAM_MODE": "polling"}
        if polling
        else {
            "TELEGRAM_MODE": "webhook",
            "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "TELEGRAM_WEBHOOK_URL": f"http://127.0.0.1:{port}/telegram/webhook",
        }
    )
    env = bot_env(
        workspace, fake_openai, BOT_DATABASE_URL=database_url, TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_BASE_URL=fake_telegram.root, BOT_LISTEN_PORT=str(port), **mode, **(environment or {}),
    )  # fmt: skip
    log = workspace.parent / f"{workspace.name}.log"
    return Replica(bot_processes.start(["run"], env, stderr=log), port, log, database_url)


async def wait_until_healthy(replica: Replica) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_SECONDS
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while loop.time() < deadline:
            assert replica.process.poll() is None, replica.log.read_text(errors="replace")
            try:
                async with http.get(f"http://127.0.0.1:{replica.port}/healthz") as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):  # not listening yet, or still busy starting
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"replica on port {replica.port} did not answer /healthz")


async def post(http: aiohttp.ClientSession, replica: Replica, update: dict[str, Any]) -> int:
    headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
    async with http.post(replica.webhook, json=update, headers=headers) as response:
        return response.status

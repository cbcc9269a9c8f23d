"""Two `python -m bot run` processes on one database, each behind its own webhook port: replicas.

Updates are posted to the replicas' webhooks as a load balancer (or Telegram retrying) would: each
update answered once, every chat's replies in the order of its messages, a fact told through one
replica known to the other, a turn of a replica killed while the model answers finished by the other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.channels.telegram_harness import TEST_RUNTIME_CONFIG, WEBHOOK_SECRET, free_port
from tests.fakes.openai_server import FakeOpenAI, Fault
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database
from tests.reliability.bot_process import bad_log_lines, stop
from tests.test_cli import bot_env

CHATS = [5101, 5102, 5103, 5104]
MESSAGES_PER_CHAT = 6
START_SECONDS = 60.0

_names = itertools.count(1)


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def webhook(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/webhook"


def start_replica(workspace: Path, database_url: str, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram) -> Replica:
    port = free_port()
    config = dict(TEST_RUNTIME_CONFIG, access={"allowedUsers": CHATS})
    (workspace / "preferences").mkdir(parents=True, exist_ok=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))
    env = bot_env(
        workspace, fake_openai, BOT_DATABASE_URL=database_url, TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_BASE_URL=fake_telegram.root, TELEGRAM_MODE="webhook", TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
        TELEGRAM_WEBHOOK_URL=f"http://127.0.0.1:{port}/telegram/webhook", BOT_LISTEN_PORT=str(port),
    )  # fmt: skip
    log = workspace.parent / f"{workspace.name}.log"
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "run"], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    return Replica(process, port, log)


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
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"replica on port {replica.port} did not answer /healthz")


async def post(http: aiohttp.ClientSession, replica: Replica, update: dict[str, Any]) -> int:
    headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
    async with http.post(replica.webhook, json=update, headers=headers) as response:
        return response.status


@pytest.fixture
async def replicas(
    postgres_server: PostgresServer, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> AsyncIterator[list[Replica]]:
    url = await asyncio.to_thread(create_database, postgres_server, f"replicas_{next(_names)}")
    started = [start_replica(tmp_path / f"replica-{n}", url, fake_openai, fake_telegram) for n in (1, 2)]
    try:
        await asyncio.gather(*(wait_until_healthy(replica) for replica in started))
        yield started
    finally:
        for replica in started:
            await asyncio.to_thread(stop, replica.process)
    for replica in started:
        assert bad_log_lines(replica.log) == []


async def test_updates_spread_over_two_replicas_are_answered_once_each_chat_in_order(
    replicas: list[Replica], fake_telegram: FakeTelegram
) -> None:
    texts = {chat: [f"message {n} of chat {chat}" for n in range(MESSAGES_PER_CHAT)] for chat in CHATS}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        for n in range(MESSAGES_PER_CHAT):
            for index, chat in enumerate(CHATS):
                update = fake_telegram.update(fake_telegram.push_message(chat, texts[chat][n]))
                first = replicas[(index + n) % 2]
                # Delivered to both replicas at once (Telegram retrying through the load balancer): answered once.
                statuses = await asyncio.gather(*(post(http, replica, update) for replica in (first, *replicas)))
                assert statuses == [200, 200, 200]
    for chat in CHATS:
        await fake_telegram.await_messages(chat, MESSAGES_PER_CHAT, timeout=60)
    await asyncio.sleep(1.0)  # a duplicate reply would come now
    for chat in CHATS:
        assert [m.text for m in fake_telegram.sent_messages(chat)] == [f"echo: {text}" for text in texts[chat]]


async def test_a_fact_told_through_one_replica_is_known_through_the_other_after_new(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[0]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        told = fake_telegram.update(fake_telegram.push_message(chat, "Remember that my locker code is 7319."))
        assert await post(http, replicas[0], told) == 200
        await fake_telegram.await_messages(chat, 1, timeout=30)
        new = fake_telegram.update(fake_telegram.push_message(chat, "/new"))
        assert await post(http, replicas[1], new) == 200
        await fake_telegram.await_messages(chat, 2, timeout=30)
        asked = fake_telegram.update(fake_telegram.push_message(chat, "what is my locker code?"))
        assert await post(http, replicas[1], asked) == 200
        replies = await fake_telegram.await_messages(chat, 3, timeout=30)
    assert replies[-1].text == "echo: what is my locker code?"
    request = fake_openai.last_chat_request()
    history = [m["content"] for m in request["messages"] if m["role"] != "system"]
    assert history == ["what is my locker code?"]  # /new cleared the conversation on the other replica
    system = "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "system")
    assert "7319" in system  # the daily note the first replica wrote, in the database


async def test_a_turn_of_a_replica_killed_mid_turn_is_finished_by_the_other(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[1]
    fake_openai.script(Fault.hang(20))  # the first replica's model call: held until it is killed
    asked_before = len(fake_openai.chat_requests())
    question = "which platform does the night train leave from?"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        assert await post(http, replicas[0], fake_telegram.update(fake_telegram.push_message(chat, question))) == 200
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(fake_openai.chat_requests()) == asked_before:
        assert loop.time() < deadline, "the first replica never asked the model"
        await asyncio.sleep(0.05)
    replicas[0].process.kill()
    await asyncio.to_thread(replicas[0].process.wait)
    assert fake_telegram.sent_messages(chat) == []
    await fake_telegram.await_messages(chat, 1, timeout=30)
    await asyncio.sleep(1.0)  # a second answer would come now
    assert [m.text for m in fake_telegram.sent_messages(chat)] == [f"echo: {question}"]

"""Messages per second answered by 1, 2 and 3 replicas (`bot run` processes) sharing one PostgreSQL.

Each replica is a real `python -m bot run` in webhook mode (`tests/database/replicas.py`) on a
throw-away PostgreSQL (`tests/postgres_server.py`: 127.0.0.1, fsync off), the fake Bot API and the
fake model answering at once. Updates of `--chats` chats (`--per-chat` each) are posted round-robin
over the replicas' webhooks, as a load balancer would; the figure is the messages answered per
second, from the first post to the last reply.

Run: `.venv/bin/python -m bench.replicas [--replicas 1 2 3] [--chats 20] [--per-chat 5] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.database.replicas import post, start_replica, wait_until_healthy
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database, running_server
from tests.reliability.bot_process import stop

FIRST_CHAT = 7001


async def messages_per_second(
    server: PostgresServer, folder: Path, replicas: int, arguments: argparse.Namespace
) -> float:
    chats = [FIRST_CHAT + number for number in range(arguments.chats)]
    url = await asyncio.to_thread(create_database, server, f"bench_replicas_{replicas}")
    with FakeOpenAI() as model, FakeTelegram() as telegram:
        running = [
            start_replica(folder / f"{replicas}-{number}", url, model, telegram, chats) for number in range(replicas)
        ]
        try:
            await asyncio.gather(*(wait_until_healthy(replica) for replica in running))
            total = int(arguments.chats) * int(arguments.per_chat)
            started = time.perf_counter()
            async with aiohttp.ClientSession() as http:
                posted = 0
                for number in range(arguments.per_chat):
                    for chat in chats:
                        update = telegram.update(telegram.push_message(chat, f"message {number}"))
                        assert await post(http, running[posted % replicas], update) == 200
                        posted += 1
            await telegram.await_until(lambda: len(telegram.sent_messages()) >= total, 600)
            return total / (time.perf_counter() - started)
        finally:
            for replica in running:
                await asyncio.to_thread(stop, replica.process)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--per-chat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    figures: dict[str, float] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as folder:
        for replicas in arguments.replicas:
            figures[f"{replicas}_replicas"] = await messages_per_second(server, Path(folder), replicas, arguments)
    if arguments.json:
        print(json.dumps(figures))
        return
    for replicas in arguments.replicas:
        rate = figures[f"{replicas}_replicas"]
        ratio = rate / figures[f"{arguments.replicas[0]}_replicas"]
        print(f"{replicas} replicas: {rate:.1f} messages/s (x{ratio:.2f})")


if __name__ == "__main__":
    asyncio.run(main())

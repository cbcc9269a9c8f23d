"""The web console's pages at 1,000 / 10,000 / 100,000 memory items: how long the owner waits for each.

For each size, a workspace whose memory holds that many synthetic items (`bench.memory_retrieval`'s
year of episodic turns, facts and procedures) and a bot built as `python -m bot run` builds it with the
HTTP listener on (no channel, lexical retrieval: no embedder to load). Once memory is loaded, a logged-in
client (aiohttp, over HTTP) asks for each page `--rounds` times: the memory page (the newest items of
each layer with their history), a search with each result's score in its parts, MEMORY.md, the health
page. Printed: the median and the slowest time per page, and the memory page's size.

Run: `.venv/bin/python -m bench.console_pages [sizes...] [--rounds N] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.memory_retrieval import make_items, sentence
from bot.app import Application
from bot.console.auth import Viewer
from bot.settings import EnvSettings
from bot.storage.jsonl import dumps_line
from tests.fakes.openai_server import FakeOpenAI

SIZES = (1_000, 10_000, 100_000)
ROUNDS = 20
OWNER = 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def prepare(count: int, workspace: Path) -> None:
    memory = workspace / "memory"
    for name, items in make_items(count, random.Random(count)).items():
        path = memory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(dumps_line(item.to_json_dict()) + "\n" for item in items))
    config = {"access": {"allowedUsers": [OWNER]}, "memory": {"embeddingsModel": None}}
    (workspace / "preferences").mkdir(parents=True, exist_ok=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))


async def timed(client: aiohttp.ClientSession, url: str, rounds: int) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        async with client.get(url) as page:
            body = await page.read()
            assert page.status == 200, (url, page.status)
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return times, size


async def measure(count: int, rounds: int, fake: FakeOpenAI) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch) / "workspace"
        prepare(count, workspace)
        env = EnvSettings(
            _env_file=None, bot_workspace=workspace, openai_base_url=fake.base_url, openai_api_key="sk-bench",
            bot_timezone="UTC", bot_listen_port=free_port(),
        )  # fmt: skip
        app = Application(env)
        await app.start()
        try:
            config = (await app.config_store.current()).memory
            started = time.perf_counter()
            await app.memory.search(config, f"telegram:{OWNER}", "garden", 1)  # memory loaded (index built)
            loaded_s = time.perf_counter() - started
            assert app.listener is not None
            root = f"http://127.0.0.1:{app.listener.port}/console"
            token = await app.console.auth.issue_link(Viewer(f"telegram:{OWNER}", True), 5)
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
                async with client.post(f"{root}/login", data={"token": token}) as login:
                    assert login.status == 200, login.status
                rng = random.Random(count + 1)
                memory, memory_bytes = await timed(client, f"{root}/memory", rounds)
                searches = [
                    (await timed(client, f"{root}/memory?q={sentence(rng, 4)[:-1]}", 1))[0][0] for _ in range(rounds)
                ]
                long_term, _ = await timed(client, f"{root}/long-term", rounds)
                health, _ = await timed(client, f"{root}/health", rounds)
        finally:
            await app.stop()
    return {
        "items": count,
        "loaded_s": loaded_s,
        "memory_p50_ms": statistics.median(memory),
        "memory_max_ms": max(memory),
        "memory_kib": memory_bytes // 1024,
        "search_p50_ms": statistics.median(searches),
        "search_max_ms": max(searches),
        "long_term_p50_ms": statistics.median(long_term),
        "health_p50_ms": statistics.median(health),
    }


async def main(sizes: list[int], rounds: int, as_json: bool) -> None:
    with FakeOpenAI() as fake:
        if not as_json:
            print("items    memory loaded  memory page p50 / max (size)   search p50 / max   MEMORY.md p50  health p50")
        for count in sizes:
            figures = await measure(count, rounds, fake)
            if as_json:
                print(json.dumps(figures))
                continue
            print(
                f"{count:>7,}  {figures['loaded_s']:>10.1f} s  {figures['memory_p50_ms']:>8.0f} / "
                f"{figures['memory_max_ms']:.0f} ms ({figures['memory_kib']} KiB)  {figures['search_p50_ms']:>8.0f} / "
                f"{figures['search_max_ms']:.0f} ms  {figures['long_term_p50_ms']:>9.1f} ms  "
                f"{figures['health_p50_ms']:>6.1f} ms"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=list(SIZES), help="memory items")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="requests per page")
    parser.add_argument("--json", action="store_true", help="one line of figures per size")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.sizes, arguments.rounds, arguments.json))

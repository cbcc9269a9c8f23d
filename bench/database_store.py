"""What keeping a chat's state in PostgreSQL (`BOT_DATABASE_URL`) costs beside the workspace's files.

The same bot (`Application`, the real router, pipeline and `openai` client, the fake model answering
at once on 127.0.0.1) runs the same messages twice: once on a workspace's files, once on a throw-away
PostgreSQL started for the run (`tests/postgres_server.py`: the wheel's server on 127.0.0.1, fsync
off as in the tests, so this is the cost of the statements and the round trips, not of a disk). One
chat (sequential): p50 / p99 per message and messages/s; many chats at once: messages/s.

Run: `.venv/bin/python -m bench.database_store [--messages 200] [--chats 50] [--per-chat 4] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from bot.app import Application
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.postgres_server import create_database, running_server


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def figures(
    fake: FakeOpenAI, workspace: Path, url: str | None, arguments: argparse.Namespace
) -> dict[str, float]:
    services = Application(env_for(workspace, fake, bot_database_url=url))
    channel = RecordingChannel()
    services.add_channels([channel])
    await services.start()
    try:
        latencies: list[float] = []
        started = time.perf_counter()
        for number in range(arguments.messages):
            sent = time.perf_counter()
            await services.router.accept(channel.message("solo", f"message {number}"), channel)
            await channel.wait_for("solo", number + 1)
            latencies.append((time.perf_counter() - sent) * 1000)
        sequential = arguments.messages / (time.perf_counter() - started)
        started = time.perf_counter()
        for number in range(arguments.per_chat):
            for chat in range(arguments.chats):
                await services.router.accept(channel.message(f"c{chat}", f"m{number}"), channel)
        await services.router.dispatcher.drain()
        at_once = arguments.chats * arguments.per_chat / (time.perf_counter() - started)
    finally:
        await services.stop()
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "sequential_per_s": sequential,
        "at_once_per_s": at_once,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--per-chat", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with FakeOpenAI() as fake, running_server() as server, tempfile.TemporaryDirectory() as folder:
        url = await asyncio.to_thread(create_database, server, "bench")
        results["files"] = await figures(fake, Path(folder) / "files", None, arguments)
        results["postgres"] = await figures(fake, Path(folder) / "postgres", url, arguments)
    if arguments.json:
        print(json.dumps(results))
        return
    for kind, values in results.items():
        print(
            f"{kind:8}  one chat: p50 {values['p50_ms']:.1f} ms, p99 {values['p99_ms']:.1f} ms, "
            f"{values['sequential_per_s']:.0f} messages/s;  {arguments.chats} chats at once: "
            f"{values['at_once_per_s']:.0f} messages/s"
        )
    files, postgres = results["files"], results["postgres"]
    print(
        f"postgres / files: p50 x{postgres['p50_ms'] / files['p50_ms']:.2f}, "
        f"one chat x{postgres['sequential_per_s'] / files['sequential_per_s']:.2f}, "
        f"chats at once x{postgres['at_once_per_s'] / files['at_once_per_s']:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())

"""Per-message cost of the pipeline, and persistence cost as the archive grows.

1. Pipeline: messages through the real router, pipeline and `openai` client to the fake
   OpenAI-compatible server answering instantly on 127.0.0.1: p50 / p99 latency and messages/s,
   for one chat (strictly sequential) and for 50 chats at once.
2. Persistence: time to save one message (archive append + live-session rewrite) when the archive
   already holds 10, 1,000 and 10,000 messages. It must stay flat: nothing grows with the archive.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bot.app import build_services, shutdown
from bot.domain.message import Message
from bot.sessions.service import SessionService
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def pipeline_figures(fake: FakeOpenAI, workspace: Path) -> None:
    services = build_services(env_for(workspace, fake))
    channel = RecordingChannel()
    latencies: list[float] = []
    sequential = 300
    started = time.perf_counter()
    for number in range(sequential):
        sent = time.perf_counter()
        await services.router.accept(channel.message("solo", f"message {number}"), channel)
        await channel.wait_for("solo", number + 1)
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - started
    print(
        f"one chat, {sequential} messages: p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, {sequential / elapsed:.0f} messages/s"
    )

    chats, per_chat = 50, 6
    started = time.perf_counter()
    for number in range(per_chat):
        for chat in range(chats):
            await services.router.accept(channel.message(f"c{chat}", f"m{number}"), channel)
    await services.router.dispatcher.drain()
    elapsed = time.perf_counter() - started
    print(f"{chats} chats x {per_chat} messages at once: {chats * per_chat / elapsed:.0f} messages/s")
    await shutdown(services, [])


async def persistence_figures(folder: Path) -> None:
    for archive_size in (10, 1_000, 10_000):
        sessions = SessionService(folder / f"archive-{archive_size}")
        session = await sessions.get_or_create("telegram", "1")
        await sessions.archive.append(session.id, [Message.user(f"old {n} " + "x" * 200) for n in range(archive_size)])
        # The live session is compaction-bounded: 20 recent messages.
        session.messages.extend(Message.user(f"recent {n}") for n in range(20))
        timings = []
        for number in range(200):
            began = time.perf_counter()
            await sessions.append_messages(session, [Message.user(f"new {number}")])
            timings.append((time.perf_counter() - began) * 1000)
            del session.messages[:-20]
        print(f"save one message, archive of {archive_size:>6}: median {statistics.median(timings):.2f} ms")


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAI() as fake:
        await pipeline_figures(fake, Path(scratch) / "workspace")
        await persistence_figures(Path(scratch))


if __name__ == "__main__":
    asyncio.run(main())

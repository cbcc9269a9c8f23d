"""Per-message cost of the pipeline, and persistence cost as the archive grows.

1. Pipeline: messages through the real router, pipeline and `openai` client to the fake
   OpenAI-compatible server answering instantly on 127.0.0.1: p50 / p99 latency and messages/s,
   for one chat (strictly sequential) and for 50 chats at once.
2. Persistence: time to save one message (archive append + live-session rewrite) when the archive
   already holds 10, 1,000 and 10,000 messages. It must stay flat: nothing grows with the archive.

With `--session-length N` and/or `--memory-items M` it measures one setting instead: the chat's
session holds N messages (put back to those N after every measured message, so it stays that long)
and the workspace's memory holds M items (written through the bot's own item store before the bot
starts: 80% episodic turns over a year, 15% semantic facts, 5% procedures). The first messages,
which load and index the memory, are not counted. `--json` prints the figures as one JSON line.

Run: `.venv/bin/python -m bench.pipeline_overhead [--session-length 1000] [--memory-items 100000]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.memory_retrieval import fill_vector_cache, make_items
from bot.app import Application
from bot.domain.message import Message
from bot.memory.items_store import MemoryItemStore
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles
from bot.workspace import Workspace
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.sessions.files import sessions_files


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def pipeline_figures(fake: FakeOpenAI, workspace: Path) -> None:
    services = Application(env_for(workspace, fake))
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
    await services.stop()


async def persistence_figures(folder: Path) -> None:
    for archive_size in (10, 1_000, 10_000):
        sessions = SessionService(SessionFiles(folder / f"archive-{archive_size}"))
        session = await sessions.get_or_create("telegram", "1")
        await sessions_files(sessions).archive.append(
            session.id, [Message.user(f"old {n} " + "x" * 200) for n in range(archive_size)]
        )
        # The live session is compaction-bounded: 20 recent messages.
        session.messages.extend(Message.user(f"recent {n}") for n in range(20))
        timings = []
        for number in range(200):
            began = time.perf_counter()
            await sessions.append_messages(session, [Message.user(f"new {number}")])
            timings.append((time.perf_counter() - began) * 1000)
            del session.messages[:-20]
        print(f"save one message, archive of {archive_size:>6}: median {statistics.median(timings):.2f} ms")


async def seed_memory(workspace: Path, count: int) -> None:
    """Write `count` synthetic items into the workspace's (global) memory through the item store, and
    their vectors into the cache."""
    store = MemoryItemStore(Workspace(workspace).memory, UTC)
    files = make_items(count, random.Random(count), now=datetime.now(UTC))
    items = [item for items in files.values() for item in items]
    store.append(items)
    await store.flush()
    # Their vectors as an earlier run would have left them (embedding 100,000 texts takes half an hour).
    fill_vector_cache(Workspace(workspace).memory.root, items, random.Random(count))


def seed_conversation(length: int) -> list[Message]:
    """`length` short alternating user/assistant messages: well under the compaction threshold."""
    return [
        Message.user(f"question {n}: what about topic {n % 97}?")
        if n % 2 == 0
        else Message.assistant(f"answer {n}: topic {n % 97} is fine.")
        for n in range(length)
    ]


async def overhead_at(
    fake: FakeOpenAI, workspace: Path, session_length: int, memory_items: int, messages: int
) -> dict[str, Any]:
    """Per-message latency in one chat whose session holds `session_length` messages, with `memory_items` items."""
    if memory_items:
        await seed_memory(workspace, memory_items)
    services = Application(env_for(workspace, fake))
    channel = RecordingChannel()
    session = await services.sessions.get_or_create(channel.channel_type, "solo")
    await services.sessions.append_messages(session, seed_conversation(session_length))
    warm_up = 5
    latencies: list[float] = []
    for number in range(warm_up + messages):
        sent = time.perf_counter()
        await services.router.accept(channel.message("solo", f"message {number} about topic {number % 97}"), channel)
        await channel.wait_for("solo", number + 1, timeout=120)
        if number >= warm_up:
            latencies.append((time.perf_counter() - sent) * 1000)
        async with services.sessions.lock_for(session.id):
            await services.sessions.replace_messages(session, session.messages[:session_length])
    await services.stop()
    return {
        "session_length": session_length,
        "memory_items": memory_items,
        "messages": messages,
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "messages_per_s": round(1000 * messages / sum(latencies), 1),
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAI() as fake:
        await pipeline_figures(fake, Path(scratch) / "workspace")
        await persistence_figures(Path(scratch))


async def one_setting(arguments: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAI() as fake:
        figures = await overhead_at(
            fake, Path(scratch) / "workspace", arguments.session_length, arguments.memory_items, arguments.messages
        )
    if arguments.json:
        print(json.dumps(figures))
        return
    print(
        f"session of {figures['session_length']} messages, {figures['memory_items']} memory items, "
        f"{figures['messages']} messages: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"{figures['messages_per_s']:.0f} messages/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--session-length", type=int, help="messages already in the chat's session")
    parser.add_argument("--memory-items", type=int, help="items in the workspace's memory")
    parser.add_argument("--messages", type=int, default=300, help="messages measured (one setting)")
    parser.add_argument("--json", action="store_true", help="one setting's figures as a JSON line")
    arguments = parser.parse_args()
    if arguments.session_length is None and arguments.memory_items is None:
        asyncio.run(main())
    else:
        arguments.session_length = arguments.session_length or 0
        arguments.memory_items = arguments.memory_items or 0
        asyncio.run(one_setting(arguments))

"""The application's lifespan: what `start` brings up, `stop` takes down, in the reverse order, leaving
nothing behind (no task, no thread, no socket)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bot.app import Application
from tests.channels.telegram_harness import free_port
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

STAGES = [
    "model client",
    "deferred fsyncs",
    "database",
    "stores",
    "memory",
    "knowledge graph",
    "MCP servers",
    "HTTP listener",
    "channels",
    "documents",
    "scheduler",
    "pipeline",
]


def recorded(app: Application) -> list[str]:
    """Each stage's start and stop, wrapped to note its name as it runs."""
    events: list[str] = []

    def noting(event: str, step: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            events.append(event)
            await step()

        return run

    app.stages = [
        dataclasses.replace(
            stage, start=noting(f"start {stage.name}", stage.start), stop=noting(f"stop {stage.name}", stage.stop)
        )
        for stage in app.stages
    ]
    return events


def open_sockets() -> set[str]:
    """The sockets this process holds open (Linux: the `socket:[inode]` links in /proc/self/fd)."""
    links = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed while listing (the listing's own descriptor)
    return {link for link in links if link.startswith("socket:")}


def app_threads() -> set[threading.Thread]:
    # The event loop's default executor belongs to the loop, which `asyncio.run` shuts down at exit.
    return {thread for thread in threading.enumerate() if not thread.name.startswith("asyncio_")}


async def test_stop_runs_the_stages_in_the_reverse_order_of_start(workspace_dir: Path, fake_openai: FakeOpenAI) -> None:
    app = Application(env_for(workspace_dir, fake_openai))
    app.add_channels([RecordingChannel()])
    events = recorded(app)
    await app.start()
    await app.stop()
    assert events == [f"start {name}" for name in STAGES] + [f"stop {name}" for name in reversed(STAGES)]


async def test_a_start_then_a_stop_leaves_no_task_thread_or_socket(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    await asyncio.sleep(0)
    tasks, threads, sockets = set(asyncio.all_tasks()), app_threads(), open_sockets()
    app = Application(env_for(workspace_dir, fake_openai, bot_listen_port=free_port()))
    channel = RecordingChannel()
    app.add_channels([channel])
    await app.start()
    assert app.scheduler.running and app.listener is not None
    await app.router.accept(channel.message("1", "hello there"), channel)
    assert await channel.wait_for("1", 1) == ["echo: hello there"]
    await app.router.dispatcher.drain()
    await app.stop()
    await asyncio.sleep(0)  # tasks cancelled by the stop finish their last step
    assert set(asyncio.all_tasks()) == tasks
    # Released, not necessarily gone this instant: memory's worker thread ends after its executor is shut
    # down, and the fake model (a thread of this process) closes its end of a connection after ours.
    for _ in range(50):
        if app_threads() == threads and open_sockets() == sockets:
            break
        await asyncio.sleep(0.1)
    assert app_threads() == threads
    assert open_sockets() == sockets


async def test_a_stop_without_a_start_releases_what_construction_opened(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    """`python -m bot status` builds the application, reads, and stops it without starting it."""
    tasks, threads = set(asyncio.all_tasks()), app_threads()
    app = Application(env_for(workspace_dir, fake_openai))
    events = recorded(app)
    await app.stop()
    await app.stop()  # a second stop does nothing
    assert events == [f"stop {name}" for name in reversed(STAGES)]
    assert set(asyncio.all_tasks()) == tasks
    assert app_threads() == threads


async def test_a_stage_that_hangs_on_stop_holds_up_neither_the_others_nor_the_exit(
    workspace_dir: Path, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    app = Application(env_for(workspace_dir, fake_openai))
    app.add_channels([RecordingChannel()])
    await app.start()

    async def hang() -> None:
        await asyncio.Event().wait()

    app.stages = [
        dataclasses.replace(stage, stop=hang) if stage.name == "MCP servers" else stage for stage in app.stages
    ]
    events = recorded(app)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING):
        await app.stop(deadline_seconds=1.0)
    assert time.monotonic() - began < 3
    assert events == [f"stop {name}" for name in reversed(STAGES)]  # the stages after it stopped too
    assert "[App] Stopping MCP servers took over" in caplog.text
    await app.mcp.close()  # what the hung stage would have done


class _Cycle:
    def __init__(self) -> None:
        self.me = self


async def test_a_start_collects_the_garbage_and_keeps_what_lives_out_of_later_collections(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    kept, dropped = _Cycle(), _Cycle()
    dropped_ref = weakref.ref(dropped)
    del dropped  # garbage only the cyclic collector can free
    app = Application(env_for(workspace_dir, fake_openai))
    app.add_channels([RecordingChannel()])
    try:
        await app.start()
        frozen = gc.get_freeze_count()
        assert dropped_ref() is None  # collected before the freeze, not kept for good
        # What is alive now (here `kept`) is in the permanent generation: a full collection skips it.
        assert frozen > 0 and not any(obj is kept for obj in gc.get_objects())
    finally:
        await app.stop()
        gc.unfreeze()

"""Shared fixtures: the fake model and the fake Telegram Bot API server run on 127.0.0.1,
and a bot wired exactly as `python -m bot` wires it, on a temporary workspace."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests import bot_processes
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

# xdist's controller loads this file and the fixture modules too, and runs no test: the application (about
# 60 MB imported) is imported by the fixtures and helpers that use it, in the workers.
if TYPE_CHECKING:
    from bot.app import Application
    from bot.settings import EnvSettings

pytest_plugins = [
    "tests.fakes.openai_fixtures",
    "tests.fakes.telegram_fixtures",
    "tests.fakes.bot_fixtures",
    "tests.postgres_server",
]

TEST_API_KEY = "sk-test-key-1234567890"

# The modules whose tests take longest (bot processes started, killed and restarted, a graph read from
# documents, the offline embedder on long texts), the longest first. They are run first: on several
# workers a long test started last keeps the run going while the other workers have nothing left to do.
LONGEST_FIRST = (
    "tests/reliability/test_crash_loop.py",
    "tests/reliability/test_graceful_stop.py",
    "tests/reliability/test_load.py",
    "tests/database/test_replicas.py",
    "tests/rag/test_documents.py",
    "tests/sessions/test_crash_consistency.py",
    "tests/memory/test_vectors.py",
    "tests/scheduler/test_reminder_process.py",
    "tests/test_cli.py",
    "tests/memory/test_hand_edit_zones_and_rewrites.py",
    "tests/reliability/test_security.py",
    "tests/setup/test_doctor.py",
    "tests/setup/test_onboard.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of `LONGEST_FIRST` first, in its order; the rest after them, in the order collected."""
    rank = {module: position for position, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONGEST_FIRST)))


AIOGRAM_UNIT = "aiogram"
# Modules whose tests share a costly fixture of module scope (a server process each worker would start again).
ONE_WORKER_MODULES = ("tests/rag/test_real_server.py",)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Tests one to a unit, as xdist's `load` hands them out, but the tests that drive aiogram all to one worker:
    importing aiogram builds its types, about 4 s of CPU and 120 MB that a worker keeps to its end, and the
    other workers then never import it; and the tests of each of `ONE_WORKER_MODULES` to one worker. The
    largest unit goes first, the rest in the order collected."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]  # xdist ships no types

    class AiogramOnOneWorker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if "aiogram" in nodeid.rsplit("::", 1)[-1]:
                return AIOGRAM_UNIT
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return AiogramOnOneWorker(config, log)


def env_for(workspace: Path, fake_openai: FakeOpenAI, **overrides: Any) -> EnvSettings:
    """Settings as the environment would give them, pointing at the fakes; no `.env` is read."""
    from bot.settings import EnvSettings

    values: dict[str, Any] = {
        "bot_workspace": workspace,
        "openai_base_url": fake_openai.base_url,
        "openai_api_key": TEST_API_KEY,
        "bot_timezone": "UTC",
    }
    values.update(overrides)
    return EnvSettings(_env_file=None, **values)


# How far a worker's resident memory may grow over what it held after its last full collection: the
# garbage of the last few tests that built a bot, kept until one full collection frees it all.
HEAP_SLACK_BYTES = 64 * 2**20
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_after_full_collection = [0]


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE_BYTES


@pytest.fixture(autouse=True)
def unfrozen_heap() -> Iterator[None]:
    """What is alive when a test starts is frozen while it runs; the tests' objects become garbage again,
    collected once the worker's resident memory has grown by `HEAP_SLACK_BYTES`.

    A bot that has loaded much freezes what is alive (`bot.heap.settle_after_load`): in the one process of
    `python -m bot` that lives as long as the bot. A test process builds a bot per test, so what a test
    froze would stay until the process ends, every test adding its own, and the next freeze's collection
    frees it only once it is unfrozen. That collection walks the whole heap of the worker (every module
    the suite imports): frozen before the test, the heap is not walked by the collections of the test's
    bot, and the full collection that frees the tests' garbage comes once for several tests.
    """
    from bot.heap import settle_after_load

    gc.freeze()
    yield
    if _resident_bytes() > _after_full_collection[0] + HEAP_SLACK_BYTES:
        gc.unfreeze()
        settle_after_load()  # the tests' garbage collected, freed memory handed back, the rest frozen
        _after_full_collection[0] = _resident_bytes()


@pytest.fixture(autouse=True)
def bot_process_server(request: pytest.FixtureRequest) -> None:
    """The fork server of the bot processes (`tests.bot_processes`) stops when a test of another module comes."""
    if request.node.nodeid.split("::")[0] not in bot_processes.MODULES:
        bot_processes.stop_server()


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    return tmp_path / "workspace"


@pytest.fixture
async def services(workspace_dir: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Application]:
    from bot.app import Application

    built = Application(env_for(workspace_dir, fake_openai))
    yield built
    await built.stop()


@pytest.fixture
def channel() -> RecordingChannel:
    return RecordingChannel()

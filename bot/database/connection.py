"""`Database`: a pool of connections to PostgreSQL, opened at start with the schema brought up to date.

Every failure of the server or the network reaches the stores as a `DatabaseError`, an `OSError`: the
stores already answer a disk that refuses a write (logged, the turn answered anyway, nothing lost that
was written before), and a database that refuses one is answered the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bot.database.migrations import SchemaTooNew, apply_migrations

log = logging.getLogger(__name__)

# Connections each process keeps: a turn's writes are a few short statements, so a handful serve many chats.
POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 10
CONNECT_TIMEOUT_SECONDS = 10.0
# How often an idle process asks the server whether it answers (`/healthz` reports the last answer).
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_TIMEOUT_SECONDS = 3.0
# Connections that hold a named lock (`Database.lock`), each for as long as its holder runs: a pool of their
# own, so holders waiting for a lock never take the connections their writes need.
LOCK_POOL_MAX_SIZE = 50
# The first key of every named lock ("bot-lock" in ASCII, cut to 32 bits): apart from other users' locks.
NAMED_LOCK_CLASS = 0x6C6F636B


def presence_lock(process_id: str) -> str:
    """The name of the lock a process holds while its database is open (free: the process is gone)."""
    return f"process:{process_id}"


async def is_gone(connection: Any, process_id: str) -> bool:
    """Whether the process `process_id` is gone: its presence lock is free. When it is, this transaction
    takes the lock until it ends, so of transactions asking at once one alone finds the process gone."""
    return bool(
        await connection.fetchval(
            "SELECT pg_try_advisory_xact_lock($1, hashtext($2))", NAMED_LOCK_CLASS, presence_lock(process_id)
        )
    )


class DatabaseError(OSError):
    """PostgreSQL could not be reached or refused a statement."""


def _driver() -> Any:
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError as error:
        raise DatabaseError(
            "BOT_DATABASE_URL is set but the PostgreSQL driver (asyncpg) is not installed: pip install -e '.[postgres]'"
        ) from error
    return asyncpg


def _failures(asyncpg: Any) -> tuple[type[Exception], ...]:
    # InternalClientError: a pooled connection the server ended meets the next statement half way through its
    # own state ("another operation is in progress"); it is the same lost server as a refused connection.
    return (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError)


class Database:
    """The pool of one `BOT_DATABASE_URL`: `start` opens it and applies the migrations, `close` closes it."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: Any = None
        self._lock_pool: Any = None
        # This process among those sharing the database: its presence lock is held while the database is open.
        self.process_id = uuid.uuid4().hex
        self._presence: Any = None
        self._heartbeat: asyncio.Task[None] | None = None
        # Whether the last statement or heartbeat reached the server (False until the pool is open).
        self.reachable = False

    async def start(self) -> None:
        asyncpg = _driver()
        failures: tuple[type[Exception], ...] = (SchemaTooNew, *_failures(asyncpg))
        try:
            self._pool = await asyncpg.create_pool(
                self._url, min_size=POOL_MIN_SIZE, max_size=POOL_MAX_SIZE, timeout=CONNECT_TIMEOUT_SECONDS
            )
            async with self._pool.acquire() as connection:
                await apply_migrations(connection)
            self._lock_pool = await asyncpg.create_pool(
                self._url, min_size=0, max_size=LOCK_POOL_MAX_SIZE, timeout=CONNECT_TIMEOUT_SECONDS
            )
            self._presence = await self._lock_pool.acquire()
            await self._presence.execute(
                "SELECT pg_advisory_lock($1, hashtext($2))", NAMED_LOCK_CLASS, presence_lock(self.process_id)
            )
        except failures as error:
            await self.close()
            raise DatabaseError(f"PostgreSQL (BOT_DATABASE_URL): {type(error).__name__}: {error}") from error
        self.reachable = True
        self._heartbeat = asyncio.create_task(self._beat(), name="database heartbeat")
        log.info("[Database] Connected; the schema is up to date")

    async def close(self) -> None:
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        pool, self._pool = self._pool, None
        lock_pool, self._lock_pool = self._lock_pool, None
        presence, self._presence = self._presence, None
        if presence is not None and lock_pool is not None:
            # Let go of the presence lock: the turns this process leaves open go to another.
            with contextlib.suppress(*_failures(_driver())):
                await lock_pool.release(presence)
        self.reachable = False
        for each in (lock_pool, pool):
            if each is not None:
                await each.close()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await asyncio.wait_for(self.fetch("SELECT 1"), HEARTBEAT_TIMEOUT_SECONDS)
            except (OSError, TimeoutError) as error:
                self._lost(error)

    def _lost(self, error: BaseException) -> None:
        if self.reachable:
            log.error("[Database] PostgreSQL does not answer: %s", error)
        self.reachable = False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A connection inside a transaction, committed when the block ends, rolled back when it raises."""
        asyncpg = _driver()
        if self._pool is None:
            raise DatabaseError("the database is not open")
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                yield connection
        except _failures(asyncpg) as error:
            if isinstance(error, DatabaseError):
                raise
            if not isinstance(error, asyncpg.PostgresError) or isinstance(error, asyncpg.PostgresConnectionError):
                self._lost(error)  # the server is out of reach (a refused statement is not that)
            raise DatabaseError(f"PostgreSQL: {type(error).__name__}: {error}") from error
        if not self.reachable:
            log.info("[Database] PostgreSQL answers again")
            self.reachable = True

    @contextlib.asynccontextmanager
    async def lock(self, name: str) -> AsyncIterator[Callable[[], Awaitable[bool]]]:
        """Hold the lock named `name` among every process of the database for the block (waiting while
        another holds it): a PostgreSQL advisory lock on a connection of its own, released when the block
        ends and lost with the connection when this process dies. Raises `DatabaseError` when it cannot
        be taken (the block does not run then). The block gets a check that says whether the lock is
        still held (False once its connection broke: the server let go of the lock then)."""
        asyncpg = _driver()
        if self._lock_pool is None:
            raise DatabaseError("the database is not open")
        try:
            connection = await self._lock_pool.acquire()
        except _failures(asyncpg) as error:
            raise DatabaseError(f"PostgreSQL: {type(error).__name__}: {error}") from error
        try:
            try:
                await connection.execute("SELECT pg_advisory_lock($1, hashtext($2))", NAMED_LOCK_CLASS, name)
            except _failures(asyncpg) as error:
                raise DatabaseError(f"PostgreSQL: {type(error).__name__}: {error}") from error

            async def still_held() -> bool:
                # The session that took the lock keeps it while it lives: its connection answering says so.
                try:
                    await asyncio.wait_for(connection.fetchval("SELECT 1"), HEARTBEAT_TIMEOUT_SECONDS)
                except _failures(asyncpg):  # a TimeoutError among them: a connection that hangs
                    return False
                return True

            try:
                yield still_held
            finally:
                with contextlib.suppress(*_failures(asyncpg)):
                    # A connection that broke meanwhile took the lock with it.
                    await connection.execute("SELECT pg_advisory_unlock($1, hashtext($2))", NAMED_LOCK_CLASS, name)
        finally:
            # Released on a cancel too: the pool's reset lets go of any lock the connection still holds.
            await self._lock_pool.release(connection)

    async def fetch(self, query: str, *args: object) -> list[Any]:
        """The rows of one statement (each a mapping by column name)."""
        async with self.transaction() as connection:
            return list(await connection.fetch(query, *args))

"""`IndexDatabase`: the connection to the SQLite file beside a scope's item files that `MemoryItemStore`
keeps what it read in.

Derived data (standard-library SQLite): the item files stay the truth, and this can always be rebuilt
from them. The layout and every statement are `bot.memory.index_sql`; a database of another
`SCHEMA_VERSION` or time zone is rebuilt.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import BinaryIO, Concatenate, ParamSpec, TypeVar

from bot.memory import index_sql

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

INDEX_FILE_NAME = "items.sqlite3"
# What reading or writing the memory index (items or vectors) may raise, for those who catch it.
INDEX_FAILURES: tuple[type[Exception], ...] = (OSError, sqlite3.Error)

T = TypeVar("T")
P = ParamSpec("P")


class IndexDatabase:
    """The connection to one scope's `index/items.sqlite3`, guarded by a lock (see the module's doc).

    It is derived data: one that cannot be opened, is of another version or was built in another time
    zone (times without a zone are read in the bot's) is moved aside and started afresh. An error met
    later marks it broken, and the store rebuilds it on its next refresh.

    One process at a time owns it (an exclusive `flock` on `items.sqlite3.lock`, held while open): the
    rows of a file with changes not yet written are the owner's alone, and another process (`python
    -m bot status` beside the running bot) reading that file must not put its older content back.
    A process that finds it owned builds a private index in memory from the files instead.
    """

    def __init__(self, path: Path, zone: tzinfo) -> None:
        self.path = path
        self._zone_name = str(zone)
        self.lock = threading.RLock()
        self.broken = False
        self._connection: sqlite3.Connection | None = None
        self._owner: BinaryIO | None = None
        self.private = False
        # Whether the last opening started an empty database (see `take_made_afresh`).
        self._made_afresh = False

    @property
    def connection(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._open_or_rebuild()
        return self._connection

    def _take_ownership(self) -> bool:
        """Lock the database for this process; False when another one holds it."""
        if fcntl is None:  # no flock (Windows): one process at a time
            return True
        handle = open(self.path.with_name(self.path.name + ".lock"), "a+b")  # held while the index is open
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._owner = handle
        return True

    def _open_or_rebuild(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.private = not self._take_ownership()
        if self.private:
            log.info("[Memory] Index %s is in use by another process: the files are read into memory", self.path)
            connection = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            index_sql.create_schema(connection)
            self._made_afresh = True
            return connection
        try:
            connection = self._open()
            if index_sql.read_meta(connection) == self._meta:
                index_sql.create_schema(connection)
                return connection
            if index_sql.read_meta(connection):
                log.info("[Memory] Index %s is of another version or time zone: rebuilt", self.path)
            connection.close()
            self._discard(aside=False)
        except sqlite3.DatabaseError as error:
            log.warning("[Memory] Index %s unreadable (%s): rebuilt from the item files", self.path, error)
            self._discard(aside=True)
        connection = self._open()
        index_sql.create_schema(connection)
        index_sql.write_meta(connection, self._meta)
        self._made_afresh = True
        return connection

    def take_made_afresh(self) -> bool:
        """Whether the database was started empty since this was last asked (opening it if closed): a store
        that had read the files into it before must read them again."""
        if self._connection is None:
            self._connection = self._open_or_rebuild()
        made_afresh, self._made_afresh = self._made_afresh, False
        return made_afresh

    def _open(self) -> sqlite3.Connection:
        """The database at `path`, checked, with its `meta` table (`index_sql.own_connection`)."""
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            index_sql.own_connection(connection)
        except sqlite3.DatabaseError:
            connection.close()
            raise
        return connection

    @property
    def _meta(self) -> dict[str, str]:
        return {"schema": index_sql.SCHEMA_VERSION, "zone": self._zone_name}

    def _discard(self, aside: bool) -> None:
        """Remove the database (moved aside when unreadable, for a post-mortem) with its WAL files."""
        for suffix in ("-wal", "-shm", "-journal"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        if aside and self.path.exists():
            self.path.rename(self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}"))
        else:
            self.path.unlink(missing_ok=True)

    def reset(self) -> None:
        """Start from an empty database (after an error: the files will be read again)."""
        with self.lock:
            private = self.private
            self.close()
            if not private:
                self._discard(aside=True)
            self.broken = False

    def read(self, query: Callable[Concatenate[sqlite3.Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`query` (an `index_sql` function) run on the connection under its lock; an error marks it broken."""
        with self.lock:
            try:
                return query(self.connection, *args, **kwargs)
            except sqlite3.DatabaseError:
                self.broken = True
                raise

    def transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        """`work` in one transaction under the lock (rolled back when it raises); an error marks it broken."""
        with self.lock:
            connection = self.connection
            try:
                index_sql.begin(connection)
                try:
                    work(connection)
                except BaseException:
                    index_sql.rollback(connection)
                    raise
                index_sql.commit(connection)
            except sqlite3.DatabaseError:
                self.broken = True
                raise

    @property
    def exists(self) -> bool:
        """Whether there is an index to open (a private one is made when opened)."""
        return self.path.exists()

    def close(self) -> None:
        with self.lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            if self._owner is not None:
                self._owner.close()  # releases the flock
                self._owner = None
            self.private = False

"""`IndexDatabase`: the SQLite file beside a scope's item files that `MemoryItemStore` keeps what it read in.

Derived data (standard-library SQLite): the item files stay the truth, and this can always be rebuilt
from them. The layout is `SCHEMA`; a database of another `SCHEMA_VERSION` or time zone is rebuilt.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from datetime import tzinfo
from pathlib import Path
from typing import BinaryIO

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

INDEX_FILE_NAME = "items.sqlite3"
# Bumped when the database's layout changes: a database of another version is rebuilt from the files.
SCHEMA_VERSION = "4"

# The version and time zone of the database: read first, before the rest of `SCHEMA` is made.
META_TABLE = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
SCHEMA = f"""
{META_TABLE};
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY,
    mtime_ns INTEGER, size INTEGER, inode INTEGER,  -- NULL: changes not yet written, re-read it
    skipped INTEGER NOT NULL DEFAULT 0,
    unterminated INTEGER NOT NULL DEFAULT 0,
    next_pos INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    pos INTEGER NOT NULL,
    layer TEXT NOT NULL,
    active INTEGER NOT NULL,
    pinned INTEGER NOT NULL,
    shared INTEGER NOT NULL,
    core INTEGER NOT NULL,
    day_file INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    slot TEXT,
    created REAL NOT NULL,
    day INTEGER NOT NULL,  -- the day it was made in the bot's time zone (date.toordinal())
    updated REAL NOT NULL,
    salience REAL NOT NULL,
    confidence REAL NOT NULL,
    speaker TEXT,
    line BLOB NOT NULL
);
-- Covering (with id): a neighbour is looked up without reading its row.
CREATE INDEX IF NOT EXISTS items_by_file ON items (file, pos, id);
-- Covering what retrieval scores an item by (`ItemFacts`) and finds its neighbours by: a candidate is scored
-- without reading its row, which its line makes ten times as large.
CREATE INDEX IF NOT EXISTS items_facts
    ON items (id, layer, active, day, speaker, updated, salience, confidence, day_file, file, pos);
CREATE INDEX IF NOT EXISTS items_by_fingerprint ON items (fingerprint) WHERE active;
CREATE INDEX IF NOT EXISTS items_by_slot ON items (slot) WHERE active AND slot IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_recent ON items (layer, active, day_file, file, created);
CREATE INDEX IF NOT EXISTS items_pinned ON items (id) WHERE active AND pinned;
CREATE INDEX IF NOT EXISTS items_shared ON items (id) WHERE active AND shared;
CREATE INDEX IF NOT EXISTS items_by_speaker ON items (speaker) WHERE active AND speaker IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_core ON items (salience, updated) WHERE active AND core;
CREATE TABLE IF NOT EXISTS kept (file TEXT NOT NULL, pos INTEGER NOT NULL, line BLOB NOT NULL,
    PRIMARY KEY (file, pos)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (ref TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (ref, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_by_id ON refs (id);
"""

INSERT_ITEM = (
    "INSERT OR REPLACE INTO items (id, file, pos, layer, active, pinned, shared, core, day_file, fingerprint, slot,"
    " created, day, updated, salience, confidence, speaker, line)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


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
            connection.executescript(SCHEMA)
            self._made_afresh = True
            return connection
        try:
            connection = self._open()
            if self._meta(connection) == {"schema": SCHEMA_VERSION, "zone": self._zone_name}:
                connection.executescript(SCHEMA)
                return connection
            if self._meta(connection):
                log.info("[Memory] Index %s is of another version or time zone: rebuilt", self.path)
            connection.close()
            self._discard(aside=False)
        except sqlite3.DatabaseError as error:
            log.warning("[Memory] Index %s unreadable (%s): rebuilt from the item files", self.path, error)
            self._discard(aside=True)
        connection = self._open()
        connection.executescript(SCHEMA)
        with connection:
            connection.executemany(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                [("schema", SCHEMA_VERSION), ("zone", self._zone_name)],
            )
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
        """The database at `path`, checked, with its `meta` table (the rest of `SCHEMA` is made once its
        version is known to be this one: another version's tables may lack the columns its indexes name)."""
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            # This process owns the file (the `flock` above): SQLite need not take and give back its own
            # file locks around every query (two `fcntl` calls each, tens a message), nor share the WAL
            # index with another process. Set before the WAL is first used, so it lives in this process.
            connection.execute("PRAGMA locking_mode=EXCLUSIVE")
            connection.execute("PRAGMA journal_mode=WAL")
            # Derived data: a power cut may lose the last transactions, never the files, and a file whose
            # signature the database lost is simply re-read.
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(META_TABLE)
            connection.execute("PRAGMA quick_check(1)").fetchone()
        except sqlite3.DatabaseError:
            connection.close()
            raise
        return connection

    @staticmethod
    def _meta(connection: sqlite3.Connection) -> dict[str, str]:
        return dict(connection.execute("SELECT name, value FROM meta").fetchall())

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

"""Every SQL statement of the memory index: the layout of `index/items.sqlite3` and `index/vectors.sqlite3`,
and one named function per thing asked of them.

Both databases are derived data (standard-library SQLite): the item files stay the truth, and vectors
can be made again. Callers hold the connection's lock and pass the connection; nothing here keeps
state. A database of another `SCHEMA_VERSION` is rebuilt from the files (`IndexDatabase`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from bot.storage.files import FileSignature

# Bumped when the database's layout changes: a database of another version is rebuilt from the files.
SCHEMA_VERSION = "4"

# SQLite's limit on bound parameters is 32,766 (3.32+); a lookup by ids goes in chunks well below it.
IDS_PER_QUERY = 500

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
-- Covering what retrieval scores an item by (`ItemFacts`) and finds its neighbours by: the store's facts table
-- is loaded without reading the rows, which their lines make ten times as large.
CREATE INDEX IF NOT EXISTS items_facts
    ON items (id, layer, active, day, speaker, updated, salience, confidence, day_file, file, pos);
CREATE INDEX IF NOT EXISTS items_by_fingerprint ON items (fingerprint) WHERE active;
CREATE INDEX IF NOT EXISTS items_by_slot ON items (slot) WHERE active AND slot IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_recent ON items (layer, active, day_file, file, created);
CREATE INDEX IF NOT EXISTS items_pinned ON items (id) WHERE active AND pinned;
CREATE INDEX IF NOT EXISTS items_shared ON items (id) WHERE active AND shared;
CREATE INDEX IF NOT EXISTS items_core ON items (salience, updated) WHERE active AND core;
-- The newest items of a layer (the console's memory page) read in order instead of sorted from every row.
CREATE INDEX IF NOT EXISTS items_newest ON items (layer, updated DESC, id) WHERE active;
CREATE TABLE IF NOT EXISTS kept (file TEXT NOT NULL, pos INTEGER NOT NULL, line BLOB NOT NULL,
    PRIMARY KEY (file, pos)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (ref TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (ref, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_by_id ON refs (id);
"""

# The values of one `items` row, in this order (see `ItemRows.row`).
_INSERT_ITEM = (
    "INSERT OR REPLACE INTO items (id, file, pos, layer, active, pinned, shared, core, day_file, fingerprint, slot,"
    " created, day, updated, salience, confidence, speaker, line)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# Rows of `items` as id and line, the shape every lookup of whole items returns.
ItemLine = tuple[str, bytes]


def _in_chunks(ids: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """For each chunk of `IDS_PER_QUERY` of `ids`: the placeholders of its `IN (...)` and its ids, padded with
    the last to a power of two (at least 8). SQLite prepares a statement for each count of placeholders and
    keeps a hundred or so; a query with a count not prepared before is prepared again, which costs more
    than running it."""
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        size = 8
        while size < len(chunk):
            size *= 2
        yield ",".join("?" * size), [*chunk, *[chunk[-1]] * (size - len(chunk))]


# -- the database itself ---------------------------------------------------------------------------


def own_connection(connection: sqlite3.Connection) -> None:
    """Settings of a database file this process owns (an exclusive `flock` beside it), then `META_TABLE`
    and a quick check (the rest of `SCHEMA` is made once its version is known to be this one: another
    version's tables may lack the columns its indexes name)."""
    # SQLite need not take and give back its own file locks around every query (two `fcntl` calls each,
    # tens a message), nor share the WAL index with another process. Set before the WAL is first used,
    # so it lives in this process.
    connection.execute("PRAGMA locking_mode=EXCLUSIVE")
    connection.execute("PRAGMA journal_mode=WAL")
    # Derived data: a power cut may lose the last transactions, never the files, and a file whose
    # signature the database lost is simply re-read.
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute(META_TABLE)
    connection.execute("PRAGMA quick_check(1)").fetchone()


def create_schema(connection: sqlite3.Connection) -> None:
    connection.executescript(SCHEMA)


def read_meta(connection: sqlite3.Connection) -> dict[str, str]:
    return dict(connection.execute("SELECT name, value FROM meta").fetchall())


def write_meta(connection: sqlite3.Connection, values: dict[str, str]) -> None:
    with connection:
        connection.executemany("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", list(values.items()))


def begin(connection: sqlite3.Connection) -> None:
    connection.execute("BEGIN")


def commit(connection: sqlite3.Connection) -> None:
    connection.execute("COMMIT")


def rollback(connection: sqlite3.Connection) -> None:
    connection.execute("ROLLBACK")


# -- files -----------------------------------------------------------------------------------------


def file_states(connection: sqlite3.Connection) -> list[tuple[str, int | None, int | None, int | None, int]]:
    """Every file known: name, signature (mtime, size, inode; NULL: changes not yet written), skipped lines."""
    return connection.execute("SELECT name, mtime_ns, size, inode, skipped FROM files").fetchall()


def record_file_read(
    connection: sqlite3.Connection,
    name: str,
    signature: FileSignature,
    skipped: int,
    unterminated: bool,
    next_pos: int,
) -> None:
    connection.execute(
        "INSERT OR REPLACE INTO files (name, mtime_ns, size, inode, skipped, unterminated, next_pos)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (name, *signature, skipped, unterminated, next_pos),
    )


def mark_file_unwritten(connection: sqlite3.Connection, name: str) -> None:
    """The file has changes not yet written: its signature is forgotten, so a crash makes it re-read."""
    connection.execute("INSERT INTO files (name) VALUES (?) ON CONFLICT (name) DO UPDATE SET mtime_ns = NULL", (name,))


def take_next_pos(connection: sqlite3.Connection, name: str) -> int:
    """The next position in the file, taken, with the file marked as `mark_file_unwritten` does (one statement)."""
    pos: int = connection.execute(
        "INSERT INTO files (name, next_pos) VALUES (?, 1)"
        " ON CONFLICT (name) DO UPDATE SET mtime_ns = NULL, next_pos = next_pos + 1 RETURNING next_pos - 1",
        (name,),
    ).fetchone()[0]
    return pos


def record_file_written(connection: sqlite3.Connection, name: str, signature: FileSignature | None) -> None:
    """The bot wrote the file, ending every line; with its signature unless it changed again meanwhile."""
    if signature is None:
        connection.execute("UPDATE files SET unterminated = 0 WHERE name = ?", (name,))
    else:
        connection.execute(
            "UPDATE files SET mtime_ns = ?, size = ?, inode = ?, unterminated = 0 WHERE name = ?", (*signature, name)
        )


def is_unterminated(connection: sqlite3.Connection, name: str) -> bool:
    """Whether the file's last line, as last read, lacks its newline."""
    row = connection.execute("SELECT unterminated FROM files WHERE name = ?", (name,)).fetchone()
    return bool(row and row[0])


def delete_file_rows(connection: sqlite3.Connection, name: str) -> None:
    """The file's items and kept lines (the file itself stays known)."""
    connection.execute("DELETE FROM items WHERE file = ?", (name,))
    connection.execute("DELETE FROM kept WHERE file = ?", (name,))


def delete_file(connection: sqlite3.Connection, name: str) -> None:
    delete_file_rows(connection, name)
    connection.execute("DELETE FROM files WHERE name = ?", (name,))


def insert_kept(connection: sqlite3.Connection, rows: Iterable[tuple[str, int, bytes]]) -> None:
    """Lines kept in their files without being items: (file, position, line)."""
    connection.executemany("INSERT INTO kept (file, pos, line) VALUES (?, ?, ?)", rows)


def file_lines(connection: sqlite3.Connection, name: str) -> list[bytes]:
    """The file's items and kept lines, in their places."""
    rows = connection.execute(
        "SELECT pos, line FROM items WHERE file = ? UNION ALL SELECT pos, line FROM kept WHERE file = ? ORDER BY 1",
        (name, name),
    ).fetchall()
    return [line for _, line in rows]


# -- items: writing --------------------------------------------------------------------------------


def insert_items(connection: sqlite3.Connection, rows: Iterable[Sequence[object]]) -> None:
    """Rows made by `ItemRows.row`; a row with an id already stored replaces it."""
    connection.executemany(_INSERT_ITEM, rows)


def insert_item(connection: sqlite3.Connection, row: Sequence[object]) -> None:
    connection.execute(_INSERT_ITEM, row)


def has_item(connection: sqlite3.Connection, item_id: str) -> bool:
    return connection.execute("SELECT 1 FROM items WHERE id = ?", (item_id,)).fetchone() is not None


def place_of(connection: sqlite3.Connection, item_id: str) -> tuple[str, int] | None:
    """The file and position of a stored item."""
    row = connection.execute("SELECT file, pos FROM items WHERE id = ?", (item_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def delete_item(connection: sqlite3.Connection, item_id: str) -> str | None:
    """Delete the item's row; the file it was in (None: not stored)."""
    row = connection.execute("DELETE FROM items WHERE id = ? RETURNING file", (item_id,)).fetchone()
    return None if row is None else str(row[0])


def ids_in_file(connection: sqlite3.Connection, name: str) -> list[str]:
    return [row[0] for row in connection.execute("SELECT id FROM items WHERE file = ?", (name,))]


def ids_in_other_files(connection: sqlite3.Connection, name: str, item_ids: Sequence[str]) -> list[str]:
    """Those of `item_ids` stored in a file other than `name`."""
    found: list[str] = []
    for marks, padded in _in_chunks(item_ids):
        rows = connection.execute(f"SELECT id FROM items WHERE file != ? AND id IN ({marks})", (name, *padded))
        found += [row[0] for row in rows]
    return found


def lines_in_file(connection: sqlite3.Connection, name: str, item_ids: Sequence[str]) -> dict[str, bytes]:
    """The lines of those of `item_ids` stored in the file."""
    lines: dict[str, bytes] = {}
    for marks, padded in _in_chunks(item_ids):
        rows = connection.execute(f"SELECT id, line FROM items WHERE file = ? AND id IN ({marks})", (name, *padded))
        lines.update(rows)
    return lines


# -- references (message ids the items were made from) ---------------------------------------------


def insert_refs(connection: sqlite3.Connection, rows: Iterable[tuple[str, str]]) -> None:
    """(message id, item id) pairs."""
    connection.executemany("INSERT OR IGNORE INTO refs (ref, id) VALUES (?, ?)", rows)


def delete_refs(connection: sqlite3.Connection, item_ids: Iterable[str]) -> None:
    connection.executemany("DELETE FROM refs WHERE id = ?", [(item_id,) for item_id in item_ids])


def ids_referring_to(connection: sqlite3.Connection, references: Sequence[str]) -> list[str]:
    ids: list[str] = []
    for marks, padded in _in_chunks(references):
        rows = connection.execute(f"SELECT DISTINCT id FROM refs WHERE ref IN ({marks})", padded)
        ids += [row[0] for row in rows]
    return ids


def refs_of(connection: sqlite3.Connection, item_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(item id, message id) of every reference of `item_ids`."""
    found: list[tuple[str, str]] = []
    for marks, padded in _in_chunks(item_ids):
        found += connection.execute(f"SELECT id, ref FROM refs WHERE id IN ({marks})", padded).fetchall()
    return found


def is_referenced(connection: sqlite3.Connection, reference: str) -> bool:
    return connection.execute("SELECT 1 FROM refs WHERE ref = ? LIMIT 1", (reference,)).fetchone() is not None


# -- items: reading --------------------------------------------------------------------------------


def count_items(connection: sqlite3.Connection) -> int:
    count: int = connection.execute("SELECT count(*) FROM items").fetchone()[0]
    return count


def lines_after(
    connection: sqlite3.Connection, after: int, limit: int, active: bool | None = None, layer: str | None = None
) -> list[tuple[int, bytes]]:
    """(rowid, line) of the next `limit` rows past rowid `after`, in rowid order: every row (`active` None),
    the active ones (and of those, with `layer`, the ones of that layer), or the inactive ones."""
    if layer is not None:
        where = "WHERE active AND layer = ? AND"
    else:
        where = "WHERE" if active is None else "WHERE active AND" if active else "WHERE NOT active AND"
    parameters: tuple[object, ...] = (layer, after) if layer is not None else (after,)
    return connection.execute(
        f"SELECT rowid, line FROM items {where} rowid > ? ORDER BY rowid LIMIT {int(limit)}", parameters
    ).fetchall()


def line_of(connection: sqlite3.Connection, item_id: str) -> bytes | None:
    row = connection.execute("SELECT line FROM items WHERE id = ?", (item_id,)).fetchone()
    return None if row is None else bytes(row[0])


def lines_of(connection: sqlite3.Connection, item_ids: Sequence[str]) -> list[ItemLine]:
    found: list[ItemLine] = []
    for marks, padded in _in_chunks(item_ids):
        found += connection.execute(f"SELECT id, line FROM items WHERE id IN ({marks})", padded).fetchall()
    return found


def recently_updated(connection: sqlite3.Connection, limit: int) -> list[ItemLine]:
    return connection.execute(
        "SELECT id, line FROM items WHERE active ORDER BY updated DESC, id LIMIT ?", (limit,)
    ).fetchall()


def newest_ids_in_layer(connection: sqlite3.Connection, layer: str, limit: int) -> list[str]:
    """The ids of the `limit` active items of one layer changed last, newest first."""
    # The ids are sorted alone, then only those lines are read: rows sorted with their lines are slow.
    rows = connection.execute(
        "SELECT id FROM items WHERE active AND layer = ? ORDER BY updated DESC, id LIMIT ?", (layer, limit)
    )
    return [row[0] for row in rows]


def count_by_layer(connection: sqlite3.Connection) -> list[tuple[str, int]]:
    return connection.execute("SELECT layer, count(*) FROM items WHERE active GROUP BY layer").fetchall()


def by_fingerprint(connection: sqlite3.Connection, fingerprint: str, layer: str | None) -> ItemLine | None:
    """The active item with this fingerprint (in `layer`, when given), the lowest id first."""
    # Two statements rather than `layer LIKE ?` with "%" for any: a bound LIKE pattern makes SQLite
    # prepare the statement again at every run (four times the lookup's cost).
    if layer is None:
        cursor = connection.execute(
            "SELECT id, line FROM items WHERE fingerprint = ? AND active ORDER BY id LIMIT 1", (fingerprint,)
        )
    else:
        cursor = connection.execute(
            "SELECT id, line FROM items WHERE fingerprint = ? AND active AND layer = ? ORDER BY id LIMIT 1",
            (fingerprint, layer),
        )
    row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


def inactive_in_slot(connection: sqlite3.Connection, slot: str) -> list[ItemLine]:
    return connection.execute("SELECT id, line FROM items WHERE slot = ? AND NOT active", (slot,)).fetchall()


def active_in_slot(connection: sqlite3.Connection, slot: str, layer: str) -> list[ItemLine]:
    return connection.execute(
        "SELECT id, line FROM items WHERE slot = ? AND active AND layer = ?", (slot, layer)
    ).fetchall()


def core(connection: sqlite3.Connection, limit: int) -> list[ItemLine]:
    """The `limit` most salient (then newest) active core items."""
    return connection.execute(
        "SELECT id, line FROM items WHERE active AND core ORDER BY salience DESC, updated DESC LIMIT ?", (limit,)
    ).fetchall()


def pinned(connection: sqlite3.Connection) -> list[ItemLine]:
    return connection.execute("SELECT id, line FROM items WHERE active AND pinned ORDER BY id").fetchall()


def shared(connection: sqlite3.Connection) -> list[ItemLine]:
    return connection.execute("SELECT id, line FROM items WHERE active AND shared ORDER BY id").fetchall()


def recent_episodic_ids(
    connection: sqlite3.Connection, first_file: str, since: float, limit: int, offset: int
) -> list[str]:
    """Ids of active EPISODIC items of the day files from `first_file` on, created since `since` (epoch
    seconds), newest first: rows `offset` to `offset + limit`."""
    rows = connection.execute(
        "SELECT id FROM items WHERE layer = 'EPISODIC' AND active = 1 AND day_file = 1 AND file >= ?"
        " AND created >= ? ORDER BY file DESC, created DESC LIMIT ? OFFSET ?",
        (first_file, since, limit, offset),
    )
    return [row[0] for row in rows]


def all_facts(connection: sqlite3.Connection) -> sqlite3.Cursor:
    """Per row of `items`: id, layer, active, day, speaker, updated, salience, confidence (the columns of
    `ItemFacts`), day_file, file, pos (where it is among the turns of its day file); to be fetched as the
    caller goes (under the connection's lock), so the rows are not all held at once."""
    # The covering index `items_facts` holds every column asked for: no row (with its line) is read.
    return connection.execute(
        "SELECT id, layer, active, day, speaker, updated, salience, confidence, day_file, file, pos"
        " FROM items INDEXED BY items_facts"
    )


# -- vectors (`index/vectors.sqlite3`) -------------------------------------------------------------


def open_vector_cache(connection: sqlite3.Connection) -> None:
    """Settings and table of the vector cache, then a check of the whole file."""
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS vectors (embedder TEXT NOT NULL, key TEXT NOT NULL, vector BLOB NOT NULL,"
        " PRIMARY KEY (embedder, key)) WITHOUT ROWID"
    )
    connection.execute("PRAGMA quick_check").fetchone()


def vectors_of(connection: sqlite3.Connection, embedder: str) -> sqlite3.Cursor:
    """(text key, float16 bytes) of every vector of `embedder`, to be fetched as the caller goes."""
    return connection.execute("SELECT key, vector FROM vectors WHERE embedder = ?", (embedder,))


def vector_embedders(connection: sqlite3.Connection) -> list[str]:
    """The embedders that have vectors in the cache."""
    return [row[0] for row in connection.execute("SELECT DISTINCT embedder FROM vectors")]


def vectors_with_keys(connection: sqlite3.Connection, embedder: str, keys: list[str]) -> list[tuple[str, bytes]]:
    """(text key, float16 bytes) of the vectors of `embedder` stored under `keys`."""
    marks = ",".join("?" * len(keys))
    return connection.execute(
        f"SELECT key, vector FROM vectors WHERE embedder = ? AND key IN ({marks})", (embedder, *keys)
    ).fetchall()


def store_vectors(connection: sqlite3.Connection, embedder: str, vectors: Iterable[tuple[str, bytes]]) -> None:
    """Store (text key, float16 bytes) pairs in one transaction."""
    with connection:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT OR REPLACE INTO vectors (embedder, key, vector) VALUES (?, ?, ?)",
            [(embedder, key, blob) for key, blob in vectors],
        )

"""The memory items in PostgreSQL (`BOT_DATABASE_URL`): `DatabaseItemStore`, the `ItemStore` of one scope
over the rows of `memory_items`, and `VectorRows`, every item's vector in `memory_vectors` (pgvector).

The rows are the truth: one per line of the scope's item files (`file` and `position`), holding the
item's fields as JSON (`item`, jsonb: a hand edit is an `UPDATE`), or a line that is not JSON kept as it
was (`line`). Every statement that changes rows of a file raises that file's number in
`memory_item_files` (a trigger), whoever made it: another replica, or a person in psql.

`ItemStore` is synchronous: retrieval looks items up hundreds of times a turn, under the scope's lock,
and cannot await a query for each. asyncpg is asynchronous. So each process reads a copy of the rows:
the scope's item files written from them into a folder of the process's own. `DatabaseItemStore` is a
`MemoryItemStore` over that copy (its SQLite index, and the BM25 and vector indexes that follow it),
which ranks exactly as it does over a workspace's files. Two awaited steps keep the copy and the rows in step:

- `refresh`, before each use of the scope (`MemoryScopes.fresh`): one query for the files' numbers, and
  the rows of each file whose number moved, written over its copy; `refresh_sync` then reads that copy
  as it reads a hand-edited file.
- `flush`: what this process changed (items added, replaced, moved, removed) written to the rows in one
  transaction. A file with changes not yet written is not read back meanwhile; a file another process
  changed too is read back once they are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from bot.database.connection import Database
from bot.domain.memory import MemoryItem
from bot.memory.embeddings import QuantizedBatch
from bot.memory.item_files import read_raw
from bot.memory.items_store import MemoryItemStore
from bot.memory.vector_cache import LOAD_BATCH_ROWS, VectorCache, quantized_batches
from bot.storage.files import read_text_sync, write_atomic_sync
from bot.storage.folder_changes import FolderChanges
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths

log = logging.getLogger(__name__)

# The item files a scope may hold, relative to its items/ folder (a row naming another file is left out).
ITEM_FILE = re.compile(r"^(semantic|procedural)\.jsonl$|^episodic/\d{4}-\d{2}-\d{2}\.jsonl$")
# What `vector_send` puts before a vector's components (its dimensions and a reserved word, 16 bits each).
_VECTOR_HEADER_BYTES = 4
# The temporary folder of a process's copies: this, its process id, a dash, a random part.
COPIES_PREFIX = "bot-memory-items-"

_OF_KEYS = "embedder = $1 AND key = ANY($2::text[])"
_FILE_CHANGES = "SELECT file, change FROM memory_item_files WHERE scope = $1"
_FILE_ROWS = (
    "SELECT file, item::text AS item, line FROM memory_items WHERE scope = $1 AND file = ANY($2::text[])"
    " ORDER BY file, position"
)
# Items written back, by id: a row of the id is updated where it is (moved to the end of its new file when
# its file changed), and an id no row has is added at the end of its file.
_UPSERT = """
WITH incoming AS (
    SELECT id, file, item::jsonb AS item, n
    FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS t(id, file, item, n)
), updated AS (
    UPDATE memory_items m SET item = i.item, line = NULL, updated_at = now(), file = i.file,
        position = CASE WHEN m.file = i.file THEN m.position
                   ELSE nextval(pg_get_serial_sequence('memory_items', 'position')) END
    FROM incoming i WHERE m.scope = $1 AND m.id = i.id
    RETURNING m.id
)
INSERT INTO memory_items (scope, file, item)
SELECT $1, i.file, i.item FROM incoming i WHERE i.id NOT IN (SELECT id FROM updated) ORDER BY i.n
"""


def item_line(item: MemoryItem) -> str:
    """The item's JSON line, as the item files hold it (a lone surrogate written as its escape). jsonb holds
    no NUL character: one in a text becomes U+FFFD, rather than the whole write being refused."""
    line = dumps_line(item.to_json_dict()).encode("utf-8", "backslashreplace").decode("utf-8")
    return line.replace("\\u0000", "\\ufffd")


def row_line(item: str | None, line: str | None) -> str:
    """A row's line in its file: the item's JSON, or the line kept as it was."""
    return item if item is not None else (line or "")


def file_text(lines: Iterable[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


class DatabaseItemStore(MemoryItemStore):
    """The items of one memory scope as rows of `memory_items`: read through this process's copy of them (a
    `MemoryItemStore` over the copy's files), written to both."""

    def __init__(
        self, database: Database, scope: str, copy: MemoryPaths, zone: tzinfo, changes: FolderChanges | None
    ) -> None:
        super().__init__(copy, zone, None, changes)
        self._database = database
        self._scope = scope
        # Each file's number as the copy holds it.
        self._seen: dict[str, int] = {}
        # What waits for `flush`: ids written (added, replaced or moved) and removed, and the files they touch.
        self._written: dict[str, None] = {}
        self._removed: dict[str, None] = {}
        self._unwritten_files: set[str] = set()
        # The files whose changes a flush is writing to the rows now (not read back until it is done).
        self._writing: set[str] = set()
        self._rows_lock = asyncio.Lock()

    def _name(self, path: Path) -> str:
        return path.relative_to(self.paths.items_dir).as_posix()

    async def refresh(self) -> None:
        """Write over the copy every file whose rows changed since it was written (by another process, or
        by hand), except those with changes of this process not yet in the rows."""
        async with self._database.transaction() as connection:
            numbers = {
                str(row["file"]): int(row["change"]) for row in await connection.fetch(_FILE_CHANGES, self._scope)
            }
            changed = [
                name
                for name, number in numbers.items()
                if self._seen.get(name) != number and name not in self._unwritten_files and name not in self._writing
            ]
            if not changed:
                return
            rows = await connection.fetch(_FILE_ROWS, self._scope, changed)
        lines: dict[str, list[str]] = {name: [] for name in changed}
        for row in rows:
            lines[row["file"]].append(row_line(row["item"], row["line"]))
        await asyncio.to_thread(self._write_copies, lines)
        for name in changed:
            self._seen[name] = numbers[name]

    def _write_copies(self, files: dict[str, list[str]]) -> None:
        for name, lines in files.items():
            if not ITEM_FILE.match(name):
                log.warning("[Memory] Left out the rows of %r in scope %s: not an item file's name", name, self._scope)
                continue
            path = self.paths.items_dir / name
            data = file_text(lines)
            if read_text_sync(path) != data.decode("utf-8", "surrogateescape"):
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic_sync(path, data)

    def _wrote(self, item_ids: Iterable[str], paths: Iterable[Path | None]) -> None:
        for item_id in item_ids:
            self._removed.pop(item_id, None)
            self._written[item_id] = None
        self._unwritten_files.update(self._name(path) for path in paths if path is not None)

    def append(self, items: list[MemoryItem]) -> None:
        super().append(items)
        self._wrote([item.id for item in items], [self.file_for(item) for item in items])

    def replace(self, items: list[MemoryItem]) -> None:
        super().replace(items)
        self._wrote([item.id for item in items], [self.file_of(item.id) for item in items])

    def relocate(self, item: MemoryItem) -> None:
        before = self.file_of(item.id)
        super().relocate(item)
        self._wrote([item.id], [before, self.file_of(item.id)])

    def remove(self, item_ids: list[str]) -> list[MemoryItem]:
        places = [self.file_of(item_id) for item_id in item_ids]
        removed = super().remove(item_ids)
        for item in removed:
            self._written.pop(item.id, None)
            self._removed[item.id] = None
        self._unwritten_files.update(self._name(path) for path in places if path is not None)
        return removed

    @property
    def dirty(self) -> bool:
        return super().dirty or bool(self._written or self._removed)

    async def flush(self, durable: bool = True) -> None:
        """Write this process's changes to the copy, then to the rows (one transaction; kept pending and
        raised as `DatabaseError` when the database refuses it)."""
        await super().flush(durable=False)
        async with self._rows_lock:
            written, removed, files = self._written, self._removed, self._unwritten_files
            if not (written or removed or files):
                return
            self._written, self._removed, self._unwritten_files = {}, {}, set()
            self._writing = files
            try:
                await self._write_rows(list(written), list(removed), sorted(files))
            except BaseException:
                self._written = written | self._written
                self._removed = removed | self._removed
                self._unwritten_files |= files
                raise
            finally:
                self._writing = set()

    async def _write_rows(self, written: list[str], removed: list[str], files: list[str]) -> None:
        found = self.get_many(written)
        ids, names, lines = [], [], []
        for item_id, item in found.items():
            path = self.file_of(item_id)
            if path is not None:
                ids.append(item_id)
                names.append(self._name(path))
                lines.append(item_line(item))
        gone = removed + [item_id for item_id in written if item_id not in found]
        async with self._database.transaction() as connection:
            # Taken (and made) first: a process writing the same files waits, so the numbers read before and
            # after this write say whether another process changed a file in between.
            await connection.execute(
                "INSERT INTO memory_item_files (scope, file, change) SELECT $1, unnest($2::text[]), 0"
                " ON CONFLICT DO NOTHING",
                self._scope, files,
            )  # fmt: skip
            before = await connection.fetch(
                "SELECT file, change FROM memory_item_files WHERE scope = $1 AND file = ANY($2::text[]) FOR UPDATE",
                self._scope, files,
            )  # fmt: skip
            if gone:
                await connection.execute(
                    "DELETE FROM memory_items WHERE scope = $1 AND id = ANY($2::text[])", self._scope, gone
                )
            if ids:
                await connection.execute(_UPSERT, self._scope, ids, names, lines)
            after = await connection.fetch(
                "SELECT file, change FROM memory_item_files WHERE scope = $1 AND file = ANY($2::text[])",
                self._scope, files,
            )  # fmt: skip
        previous = {str(row["file"]): int(row["change"]) for row in before}
        for row in after:
            name = str(row["file"])
            # The copy holds what the rows hold only when nobody else changed the file since it was read.
            if previous.get(name) == self._seen.get(name, 0):
                self._seen[name] = int(row["change"])


class VectorRows:
    """The vectors of every scope's items, by embedder and text key, in `memory_vectors` (pgvector)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @property
    def where(self) -> str:
        return "the database's memory_vectors"

    async def load_quantized(self, embedder: str, keys: set[str]) -> list[QuantizedBatch]:
        # Only the scope's own keys are read: the table holds the vectors of every scope.
        async with self._database.transaction() as connection:
            cursor = connection.cursor(
                f"SELECT key, vector_send(vector) AS data FROM memory_vectors WHERE {_OF_KEYS}", embedder, list(keys)
            )
            batches: list[tuple[list[str], npt.NDArray[np.float32]]] = []
            rows: list[Any] = []
            async for row in cursor:
                rows.append(row)
                if len(rows) >= LOAD_BATCH_ROWS:
                    batches.append(self._matrix(rows))
                    rows = []
            if rows:
                batches.append(self._matrix(rows))
        return quantized_batches(iter(batches))

    async def load(self, embedder: str, keys: set[str]) -> dict[str, npt.NDArray[np.float16]]:
        rows = await self._database.fetch(
            f"SELECT key, vector_send(vector) AS data FROM memory_vectors WHERE {_OF_KEYS}", embedder, list(keys)
        )
        if not rows:
            return {}
        found, matrix = self._matrix(rows)
        return dict(zip(found, matrix.astype(np.float16), strict=True))

    @staticmethod
    def _matrix(rows: list[Any]) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The keys of `rows` and their vectors, one per row, from pgvector's binary form (big-endian floats)."""
        data = b"".join(row["data"] for row in rows)
        width = len(rows[0]["data"])
        words = np.frombuffer(data, dtype=">f4").reshape(len(rows), width // 4)
        return [str(row["key"]) for row in rows], words[:, _VECTOR_HEADER_BYTES // 4 :].astype(np.float32)

    async def store(self, embedder: str, vectors: dict[str, npt.NDArray[np.float16]]) -> None:
        if not vectors:
            return
        keys = list(vectors)
        texts = ["[" + ",".join(repr(float(value)) for value in vectors[key]) + "]" for key in keys]
        dimensions = len(next(iter(vectors.values())))
        async with self._database.transaction() as connection:
            await connection.execute(
                "INSERT INTO memory_vectors (embedder, key, dimensions, vector)"
                " SELECT $1, key, $3, vector::vector FROM unnest($2::text[], $4::text[]) AS t(key, vector)"
                " ON CONFLICT (embedder, key) DO NOTHING",
                embedder, keys, dimensions, texts,
            )  # fmt: skip

    async def close(self) -> None:
        """Nothing to close: the database is the stores' (`Stores.close`)."""


class ItemRowsInDatabase:
    """Every scope's items and their vectors in one database, each scope read through a copy of its rows in
    a temporary folder of this process (removed by `close`)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._vectors = VectorRows(database)
        self._root: Path | None = None

    @property
    def vectors(self) -> VectorRows:
        return self._vectors

    async def scopes(self) -> list[str]:
        rows = await self._database.fetch("SELECT DISTINCT scope FROM memory_item_files ORDER BY scope")
        return [str(row["scope"]) for row in rows]

    def store(self, scope: str, zone: tzinfo, changes: FolderChanges | None) -> DatabaseItemStore:
        if self._root is None:
            remove_copies_of_ended_processes(Path(tempfile.gettempdir()))
            self._root = Path(tempfile.mkdtemp(prefix=f"{COPIES_PREFIX}{os.getpid()}-"))
        copy = Path(tempfile.mkdtemp(dir=self._root))
        return DatabaseItemStore(self._database, scope, MemoryPaths(copy), zone, changes)

    def close(self) -> None:
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def remove_copies_of_ended_processes(folder: Path) -> list[Path]:
    """Remove the copies in `folder` that a process left when it was killed (its `close` never ran): those
    whose process id, in the folder's name, no process has. Returns what was removed."""
    removed: list[Path] = []
    for copies in folder.glob(f"{COPIES_PREFIX}*"):
        pid = copies.name.removeprefix(COPIES_PREFIX).partition("-")[0]
        if pid.isdigit() and not _process_runs(int(pid)):
            shutil.rmtree(copies, ignore_errors=True)
            removed.append(copies)
    return removed


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _as_row(line: str) -> tuple[str | None, str | None]:
    """(item, line) of a file's line: JSON goes in `item`, anything else is kept in `line` as it is."""
    try:
        json.loads(line)
    except ValueError:
        return None, line
    # jsonb holds no NUL character: such a line is kept as its text (it is read back the same).
    return (None, line) if "\\u0000" in line else (line, None)


@dataclass
class CopiedItems:
    """What `copy_item_files` wrote: items, and lines kept that are not items (each reported in the log)."""

    items: int = 0
    kept_lines: int = 0
    vectors: int = 0


async def copy_item_files(database: Database, scope: str, items_dir: Path, copied: CopiedItems) -> None:
    """Write the item files of a scope's `items_dir` over their rows: a file's rows are replaced by its lines,
    in its order (safe to repeat). Every line is kept; one that is not a valid item is counted, and logged."""
    for path, name, lines in await asyncio.to_thread(_item_files, items_dir):
        for number, line in enumerate(lines, start=1):
            try:
                MemoryItem.model_validate_json(line)
            except ValidationError as error:
                log.warning("[Memory] Line %d of %s is not an item (kept, left out of memory): %s", number, path, error)
                copied.kept_lines += 1
            else:
                copied.items += 1
        rows = [_as_row(line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")) for line in lines]
        async with database.transaction() as connection:
            await connection.execute("DELETE FROM memory_items WHERE scope = $1 AND file = $2", scope, name)
            await connection.execute(
                "INSERT INTO memory_items (scope, file, item, line) SELECT $1, $2, item::jsonb, line"
                " FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS t(item, line, n) ORDER BY n",
                scope, name, [item for item, _ in rows], [line for _, line in rows],
            )  # fmt: skip


def _item_files(items_dir: Path) -> list[tuple[Path, str, list[str]]]:
    """(path, name under items/, non-empty lines) of each item file of `items_dir`."""
    if not items_dir.is_dir():
        return []
    found = []
    for path in sorted(items_dir.rglob("*.jsonl")):
        name = path.relative_to(items_dir).as_posix()
        if ITEM_FILE.match(name):
            found.append((path, name, [line for line in read_raw(path).split("\n") if line.strip()]))
    return found


async def copy_vectors(database: Database, cache: VectorCache, copied: CopiedItems) -> None:
    """Copy every vector of a scope's cache file into `memory_vectors` (those already there are kept)."""
    if not await asyncio.to_thread(cache.path.exists):
        return
    rows = VectorRows(database)
    for embedder, batch in await asyncio.to_thread(lambda: list(cache.everything_sync())):
        await rows.store(embedder, batch)
        copied.vectors += len(batch)


async def write_item_files(database: Database, memory_dir: Path) -> int:
    """Write every scope's item files from the rows, under `memory_dir` (`bot export`); how many files.

    An item's line is written compact, as the bot writes it; a kept line as it is. A row whose scope or
    file would put it outside `memory_dir`, or name no item file, is not followed."""
    rows = await database.fetch(
        "SELECT scope, file, item::text AS item, line FROM memory_items ORDER BY scope, file, position"
    )
    return await asyncio.to_thread(_write_item_files, list(stored_lines(rows)), memory_dir)


def _write_item_files(files: list[tuple[str, str, list[str]]], memory_dir: Path) -> int:
    written = 0
    for scope, name, lines in files:
        folder = memory_dir if scope == "." else memory_dir / scope
        if not ITEM_FILE.match(name) or not folder.resolve().is_relative_to(memory_dir.resolve()):
            log.warning("[Memory] Left out the rows of %r in scope %r: not an item file of memory/", name, scope)
            continue
        compact = [dumps_line(json.loads(line)) if _as_row(line)[0] is not None else line for line in lines]
        write_atomic_sync(MemoryPaths(folder).items_dir / name, file_text(compact))
        written += 1
    return written


def stored_lines(rows: Iterable[Any]) -> Iterator[tuple[str, str, list[str]]]:
    """(scope, file, lines) of `memory_items` rows ordered by scope, file and position (`bot export`)."""
    current: tuple[str, str] | None = None
    lines: list[str] = []
    for row in rows:
        where = (str(row["scope"]), str(row["file"]))
        if where != current:
            if current is not None:
                yield current[0], current[1], lines
            current, lines = where, []
        lines.append(row_line(row["item"], row["line"]))
    if current is not None:
        yield current[0], current[1], lines

"""Where the turn ledger's records are kept: the `LedgerStore` interface and its file, `state/turns.jsonl`.

The ledger (`turns.TurnLedger`) holds the state and decides; a store only keeps its records: reads them
all at load, appends each change, and drops at compaction what is no longer asked of it. The records
are the ledger's lines (`{"seen": ...}`, `{"held": ...}`, `{"released": ...}`, `{"received": ...}`,
`{"edited": ...}`, `{"answered": ...}`, `{"delivered": ...}`); the file keeps them as written, PostgreSQL
(`postgres.LedgerTables`) as rows (all but the held updates, which stay in the memory of the process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, write_atomic
from bot.storage.jsonl import dumps_line, read_jsonl

Record = dict[str, Any]

# Far more than a transport redelivers after a crash (Telegram: one unacknowledged batch of at most 100).
REMEMBERED_KEYS = 2000


class LedgerStore(Protocol):
    """The ledger's records, kept. A failed write raises `OSError` (a database's failure is one too)."""

    @property
    def name(self) -> str:
        """What the log lines call it (a path, or the database's tables)."""
        ...

    @property
    def legacy_state(self) -> Path | None:
        """The folder whose files from before the ledger are taken over when the store is empty (None: none)."""
        ...

    @property
    def shared(self) -> bool:
        """Whether several processes may keep their records here (then each transport key is `claim`ed)."""
        ...

    async def claim(self, channel_type: str, key: str) -> bool:
        """Record the transport key as taken by this process, in one atomic write: False when a process
        sharing the store took it first (only a `shared` store is asked)."""
        ...

    async def read(self) -> list[Record]:
        """Every record kept, oldest first (an unreadable one is left out, logged); of a `shared` store, the
        open turns are those it `adopt`s."""
        ...

    async def adopt(self) -> list[Record]:
        """The records of the open turns whose process is gone (stopped or died), now this process's to
        answer: each taken by one process (a store only this process uses has none)."""
        ...

    async def append(self, records: list[Record], durable: bool) -> None:
        """Keep `records`; `durable` False: a power cut may lose them (a crash may not). Each record is kept
        whole or not at all, in order; a crash during the append may keep the first ones only (a file's write
        cut between two pages), so each record must stand alone: none is acknowledged before all are kept."""
        ...

    async def compact(self, still_asked: list[Record]) -> None:
        """Drop what is no longer asked of the store: `still_asked` is what the ledger needs to load again
        (the open turns and the newest keys)."""
        ...


class LedgerFile:
    """The records as lines of one file, appended with fsync and rewritten atomically at compaction."""

    def __init__(self, path: Path, deferred: DeferredSync | None = None) -> None:
        self._path = path
        self._deferred = deferred

    @property
    def name(self) -> str:
        return str(self._path)

    @property
    def legacy_state(self) -> Path | None:
        return self._path.parent if not self._path.exists() else None

    @property
    def shared(self) -> bool:
        return False

    async def claim(self, channel_type: str, key: str) -> bool:
        await self.append([{"seen": [[channel_type, key]]}], durable=True)
        return True

    async def read(self) -> list[Record]:
        return await read_jsonl(self._path)

    async def adopt(self) -> list[Record]:
        return []

    async def append(self, records: list[Record], durable: bool) -> None:
        await append_lines(self._path, [dumps_line(record) for record in records], None if durable else self._deferred)

    async def compact(self, still_asked: list[Record]) -> None:
        data = "".join(dumps_line(record) + "\n" for record in still_asked)
        await write_atomic(self._path, data.encode("utf-8", "backslashreplace"))

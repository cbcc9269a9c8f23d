"""`TraceTable`: the recent traces of every chat in PostgreSQL (`console_traces`), with `BOT_DATABASE_URL`.

Every process of the database writes its turns there, and the console of any reads every process's: the
owner sees the whole story of a chat whichever replica answered each turn. A row that is not a trace is
logged and left out (the chat's newer turns trim it away).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bot.database.connection import Database
from bot.domain.memory import MemoryItem
from bot.pipeline.trace_records import TurnTrace, redacted, trace_from_json, trace_to_json

log = logging.getLogger(__name__)


class TraceTable:
    """The `console_traces` table, shared by every process of the database (see the module's docstring)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def add(self, trace: TurnTrace, kept: int) -> None:
        async with self._database.transaction() as connection:
            await connection.execute(
                "INSERT INTO console_traces (session_id, trace) VALUES ($1, $2)", trace.session_id, _line(trace)
            )
            await connection.execute(
                "DELETE FROM console_traces WHERE session_id = $1 AND position < (SELECT min(position) FROM"
                " (SELECT position FROM console_traces WHERE session_id = $1 ORDER BY position DESC LIMIT $2) newest)",
                trace.session_id,
                kept,
            )

    async def chats(self) -> list[str]:
        rows = await self._database.fetch("SELECT DISTINCT session_id FROM console_traces ORDER BY session_id")
        return [str(row["session_id"]) for row in rows]

    async def of(self, session_id: str, kept: int) -> list[TurnTrace]:
        rows = await self._database.fetch(
            "SELECT position, trace FROM console_traces WHERE session_id = $1 ORDER BY position DESC LIMIT $2",
            session_id,
            kept,
        )
        return _traces(reversed(rows))

    async def recent(self, limit: int) -> list[TurnTrace]:
        rows = await self._database.fetch(
            "SELECT position, trace FROM console_traces ORDER BY position DESC LIMIT $1", limit
        )
        return _traces(reversed(rows))

    async def forget(self, items: list[MemoryItem]) -> int:
        # The rows that may show an item (its id or its text, escaped as the row holds it) are read; which
        # do, and what they show instead, `redacted` decides.
        needles = sorted(
            {f'"itemId":{_escaped(item.id)}' for item in items}
            | {_escaped(item.content)[1:-1] for item in items if item.content}
        )
        async with self._database.transaction() as connection:
            rows = await connection.fetch(
                "SELECT position, trace FROM console_traces"
                " WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) AS needle WHERE strpos(trace, needle) > 0)"
                " FOR UPDATE",
                needles,
            )
            changed = [
                (int(row["position"]), _line(shown))
                for row, trace in ((row, _trace(row)) for row in rows)
                if trace is not None and (shown := redacted(trace, items)) is not None
            ]
            await connection.executemany("UPDATE console_traces SET trace = $2 WHERE position = $1", changed)
        return len(changed)


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _line(trace: TurnTrace) -> str:
    # Every character outside ASCII escaped: a lone surrogate (which UTF-8 cannot carry) is kept too.
    return json.dumps(trace_to_json(trace), ensure_ascii=True, separators=(",", ":"))


def _trace(row: Any) -> TurnTrace | None:
    try:
        record = json.loads(row["trace"])
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return trace_from_json(record)
    except (KeyError, TypeError, ValueError) as error:
        log.warning("[Console] Skipped trace row %s (not a turn's trace): %s", row["position"], error)
        return None


def _traces(rows: Any) -> list[TurnTrace]:
    return [trace for trace in map(_trace, rows) if trace is not None]

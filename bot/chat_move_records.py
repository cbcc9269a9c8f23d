"""Where the moves of chats whose id changed are recorded (`MoveRecords`): begun, then done.

`MoveFile` keeps them in `state/chat_moves.jsonl`, one process's; `MoveTable` in the table `chat_moves`
with `BOT_DATABASE_URL`, shared by every process of the database, which also answers where a chat went
(`where_moved`) for a replica that did not make the move itself. `bot migrate` copies the file into the
table (`copy_moves_file`), `bot export` writes the table out as the file (`write_moves_file`).

Apart from `bot.chat_moves`, which carries a chat's data over and pulls in the whole application, so that
`migrate` and `export` stay light.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

from bot.database.connection import Database
from bot.domain.chat_move import ChatMove
from bot.storage.files import append_lines, read_text_sync
from bot.storage.jsonl import CopiedRecords, dumps_line, parse_numbered, read_jsonl_sync, write_records
from bot.workspace import Workspace

log = logging.getLogger(__name__)

BEGUN, DONE = "begun", "done"


class MoveRecords(Protocol):
    """Where moves are recorded: begun, then done."""

    async def begun(self, move: ChatMove) -> None: ...

    async def done(self, move: ChatMove) -> None: ...

    async def unfinished(self) -> list[ChatMove]:
        """The moves begun and not done, in the order they were begun."""
        ...

    async def is_done(self, move: ChatMove) -> bool: ...

    async def finished(self) -> list[ChatMove]:
        """Every move done."""
        ...


class MoveFile:
    """`state/chat_moves.jsonl`: one line when a move begins, one when it is done."""

    def __init__(self, path: Path) -> None:
        self._path = path

    async def begun(self, move: ChatMove) -> None:
        await append_lines(self._path, [dumps_line(_record(move, BEGUN))])

    async def done(self, move: ChatMove) -> None:
        await append_lines(self._path, [dumps_line(_record(move, DONE))])

    async def unfinished(self) -> list[ChatMove]:
        states = await asyncio.to_thread(self._states)
        return [move for move, state in states.items() if state == BEGUN]

    async def is_done(self, move: ChatMove) -> bool:
        return (await asyncio.to_thread(self._states)).get(move) == DONE

    async def finished(self) -> list[ChatMove]:
        states = await asyncio.to_thread(self._states)
        return [move for move, state in states.items() if state == DONE]

    def _states(self) -> dict[ChatMove, str]:
        if not self._path.exists():
            return {}
        states: dict[ChatMove, str] = {}
        for record in read_jsonl_sync(self._path):
            try:
                move, state = _parse(record)
            except (KeyError, TypeError, ValueError):
                log.warning("[ChatMove] %s: a line without a move is skipped: %s", self._path, record)
                continue
            states[move] = state
        return states


class MoveTable:
    """The table `chat_moves`: a row when a move begins, marked done when it is."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def begun(self, move: ChatMove) -> None:
        async with self._database.transaction() as connection:
            await connection.execute(
                "INSERT INTO chat_moves (channel_type, old_chat_id, new_chat_id) VALUES ($1, $2, $3)"
                " ON CONFLICT (channel_type, old_chat_id) DO NOTHING",
                move.channel_type, move.old_chat_id, move.new_chat_id,
            )  # fmt: skip

    async def done(self, move: ChatMove) -> None:
        async with self._database.transaction() as connection:
            await connection.execute(
                "UPDATE chat_moves SET done_at = now() WHERE channel_type = $1 AND old_chat_id = $2",
                move.channel_type, move.old_chat_id,
            )  # fmt: skip

    async def unfinished(self) -> list[ChatMove]:
        rows = await self._database.fetch(
            "SELECT channel_type, old_chat_id, new_chat_id FROM chat_moves WHERE done_at IS NULL ORDER BY begun_at"
        )
        return [_move(row) for row in rows]

    async def finished(self) -> list[ChatMove]:
        rows = await self._database.fetch(
            "SELECT channel_type, old_chat_id, new_chat_id FROM chat_moves WHERE done_at IS NOT NULL ORDER BY begun_at"
        )
        return [_move(row) for row in rows]

    async def is_done(self, move: ChatMove) -> bool:
        rows = await self._database.fetch(
            "SELECT 1 FROM chat_moves WHERE channel_type = $1 AND old_chat_id = $2 AND done_at IS NOT NULL",
            move.channel_type, move.old_chat_id,
        )  # fmt: skip
        return bool(rows)

    async def where_moved(self, channel_type: str, chat_id: str) -> ChatMove | None:
        """The move done of the chat `chat_id`, if it has one (made by any process of the database)."""
        rows = await self._database.fetch(
            "SELECT channel_type, old_chat_id, new_chat_id FROM chat_moves"
            " WHERE channel_type = $1 AND old_chat_id = $2 AND done_at IS NOT NULL",
            channel_type, chat_id,
        )  # fmt: skip
        return _move(rows[0]) if rows else None


def move_records(workspace: Workspace, database: Database | None) -> MoveRecords:
    """The table with a database, else the workspace's file."""
    return MoveTable(database) if database is not None else MoveFile(workspace.chat_moves_file)


# -- moving in and out: `bot migrate` and `bot export` ---------------------------------------------------


async def copy_moves_file(database: Database, path: Path) -> CopiedRecords:
    """Write the moves of the file over their rows (safe to repeat): each in the state of its last line, so
    that a move the file says is done is followed by every process and one begun is finished by the next
    that starts. A line that is not a move is skipped, counted and logged with its number."""
    parsed = parse_numbered(read_text_sync(path) or "", path, _parse, "a chat move")
    states = dict(parsed.records)  # the last line of each move wins, as the bot reads the file
    async with database.transaction() as connection:
        # One statement a move, each its own `clock_timestamp()`: the moves are begun in the file's order.
        await connection.executemany(
            "INSERT INTO chat_moves (channel_type, old_chat_id, new_chat_id, begun_at, done_at)"
            " VALUES ($1, $2, $3, clock_timestamp(), CASE WHEN $4 THEN clock_timestamp() END)"
            " ON CONFLICT (channel_type, old_chat_id) DO UPDATE SET new_chat_id = excluded.new_chat_id,"
            " done_at = CASE WHEN $4 THEN coalesce(chat_moves.done_at, excluded.done_at) END",
            [(move.channel_type, move.old_chat_id, move.new_chat_id, state == DONE) for move, state in states.items()],
        )
    return CopiedRecords(records=len(states), skipped_lines=len(parsed.skipped))


async def write_moves_file(database: Database, path: Path) -> int:
    """Write every move to the file at `path` (atomically), as the bot on files keeps it: a line when it
    began, and one when it was done; how many moves (none: the file is left as it is)."""
    rows = await database.fetch(
        "SELECT channel_type, old_chat_id, new_chat_id, done_at FROM chat_moves ORDER BY begun_at"
    )
    lines = [_record(_move(row), BEGUN) for row in rows]
    lines += [_record(_move(row), DONE) for row in rows if row["done_at"] is not None]
    return len(rows) if await write_records(path, lines) else 0


def _record(move: ChatMove, state: str) -> dict[str, str]:
    return {"channelType": move.channel_type, "oldChatId": move.old_chat_id, "newChatId": move.new_chat_id,
            "state": state}  # fmt: skip


def _parse(record: dict[str, Any]) -> tuple[ChatMove, str]:
    """The move a line records and its state; `KeyError` or `ValueError` when the line is not one."""
    fields = (record["channelType"], record["oldChatId"], record["newChatId"], record["state"])
    # A chat id written by hand as a number is the same id.
    if not all(isinstance(value, str | int) and not isinstance(value, bool) and str(value) for value in fields):
        raise ValueError("a field holds something other than text")
    channel_type, old_chat_id, new_chat_id, state = (str(value) for value in fields)
    if state not in (BEGUN, DONE):
        raise ValueError(f"state is {BEGUN!r} or {DONE!r}, not {state!r}")
    return ChatMove(channel_type, old_chat_id, new_chat_id), state


def _move(row: Any) -> ChatMove:
    return ChatMove(str(row["channel_type"]), str(row["old_chat_id"]), str(row["new_chat_id"]))

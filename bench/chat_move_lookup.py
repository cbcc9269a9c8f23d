"""What following a chat another replica moved costs: the `chat_moves` look-up of `SessionService`.

With `BOT_DATABASE_URL`, every turn reads its chat's session again under the chat's lock (another replica
may have answered it). The look-up of `chat_moves` is made only when that read finds no stored session: a
new chat's first message, or a message of a chat another replica moved. This runs what a turn does to its
session (`reread`, then `get_or_create`) on a throw-away PostgreSQL (`tests/postgres_server.py`, fsync off as
in the tests), with the look-up and without it: look-ups per message over chats of several messages, and the
median time of a stored chat's read, a new chat's first read and a moved chat's first read.

Run: `.venv/bin/python -m bench.chat_move_lookup [--chats 200] [--messages 5] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from bot.chat_move_records import MoveTable
from bot.database.connection import Database
from bot.domain.chat_move import ChatMove
from bot.domain.message import Message
from bot.sessions.postgres import SessionTables
from bot.sessions.service import SessionService
from tests.postgres_server import create_database, running_server


async def turn_read(sessions: SessionService, chat_id: str) -> float:
    """Milliseconds to read a chat's session as a turn does under the chat's lock."""
    started = time.perf_counter()
    sessions.reread(f"test:{chat_id}")
    await sessions.get_or_create("test", chat_id)
    return (time.perf_counter() - started) * 1000


async def figures(database: Database, arguments: argparse.Namespace, prefix: str) -> dict[str, float]:
    moves = MoveTable(database)
    lookups = 0

    async def counted(channel_type: str, chat_id: str) -> ChatMove | None:
        nonlocal lookups
        lookups += 1
        return await moves.where_moved(channel_type, chat_id)

    with_lookup = SessionService(SessionTables(database), None, counted)
    without = SessionService(SessionTables(database), None, None)
    first_reads: dict[str, list[float]] = {"with": [], "without": []}
    stored_reads: list[float] = []
    for chat in range(arguments.chats):
        for name, sessions in (("with", with_lookup), ("without", without)):
            chat_id = f"{prefix}-{name}-{chat}"
            first_reads[name].append(await turn_read(sessions, chat_id))
            session = await sessions.get_or_create("test", chat_id)
            await sessions.append_messages(session, [Message.user(f"message of {chat_id}")])
            if name == "with":
                stored_reads += [await turn_read(sessions, chat_id) for _ in range(arguments.messages - 1)]
    lookups_per_message = lookups / (arguments.chats * arguments.messages)
    # Chats another process moved (the new chat's session stored, the old one's gone): each old id's first
    # read finds no session, looks the move up and reads the new chat's session.
    moved_reads = []
    for chat in range(arguments.chats):
        move = ChatMove("test", f"{prefix}-old-{chat}", f"{prefix}-new-{chat}")
        session = await without.get_or_create("test", move.new_chat_id)
        await without.append_messages(session, [Message.user(f"message of {move.new_chat_id}")])
        await moves.begun(move)
        await moves.done(move)
        moved_reads.append(await turn_read(with_lookup, move.old_chat_id))
    return {
        "lookups_per_message": lookups_per_message,
        "stored_read_ms": statistics.median(stored_reads),
        "new_chat_first_read_ms": statistics.median(first_reads["with"]),
        "new_chat_first_read_without_lookup_ms": statistics.median(first_reads["without"]),
        "moved_chat_first_read_ms": statistics.median(moved_reads),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per chat, the first one included")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    with running_server() as server:
        url = await asyncio.to_thread(create_database, server, "bench_chat_moves")
        database = Database(url)
        await database.start()
        try:
            await figures(database, arguments, "warm")  # connections opened, statements prepared
            results = await figures(database, arguments, "run")
        finally:
            await database.close()
    if arguments.json:
        print(json.dumps(results))
        return
    print(f"chats: {arguments.chats}, messages per chat: {arguments.messages}")
    print(f"look-ups of chat_moves per message: {results['lookups_per_message']:.2f} (a chat's first message only)")
    print(f"a stored chat's read (every turn), median: {results['stored_read_ms']:.2f} ms")
    without = results["new_chat_first_read_without_lookup_ms"]
    added = results["new_chat_first_read_ms"]
    print(f"a new chat's first read, median: {added:.2f} ms with the look-up, {without:.2f} ms without"
          f" (x{added / without:.2f})")  # fmt: skip
    print(f"a moved chat's first read (look-up, then the new chat's session), median: "
          f"{results['moved_chat_first_read_ms']:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())

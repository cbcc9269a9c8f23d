"""Saves messages to one session as fast as it can, forever: the victim of the crash tests.

`short` (default): the live session stays short (a compaction stand-in drops old messages), so its file
is rewritten on every save. `long`: the session is long, so its file is rewritten only every so many
saves; the id of each message is printed once its save returned (acknowledged).

`python -m tests.sessions.crash_writer WHERE [long]`: WHERE is the sessions folder, or a PostgreSQL URL.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.database.connection import Database
from bot.domain.message import Message
from bot.sessions.postgres import SessionTables
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles, SessionStorage

LONG_SESSION_MESSAGES = 1200


async def main(where: str, long: bool) -> None:
    storage: SessionStorage
    if where.startswith("postgresql://"):
        database = Database(where)
        await database.start()
        storage = SessionTables(database)
    else:
        storage = SessionFiles(Path(where))
    sessions = SessionService(storage)
    session = await sessions.get_or_create("telegram", "42")
    if long and not session.messages:
        filler = "what about the garden shed and the keys under the blue pot? " * 4
        sessions.add_unwritten(session, [Message.user(f"seed {n}: {filler}") for n in range(LONG_SESSION_MESSAGES)])
        await sessions.save(session)
        await sessions.save(session)  # now long: from here the file is left behind the archive
    number = len(session.messages)
    while True:
        number += 1
        # Vary the size so the rewrite sometimes shrinks and sometimes grows the file.
        message = Message.user(f"message {number} " + "x" * (number % 700))
        await sessions.append_messages(session, [message])
        if long:
            print("saved", message.id, flush=True)
            continue
        if len(session.messages) > 60:
            session.messages = session.messages[30:]  # stands in for compaction: the live file stays bounded
        if number % 10 == 1:
            # Only after a save, so every run adds to the archive before it can be killed.
            print("saving", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], long=sys.argv[2:] == ["long"]))

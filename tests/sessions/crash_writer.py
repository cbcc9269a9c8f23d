"""Saves messages to one session as fast as it can, forever: the victim of the crash test."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.domain.message import Message
from bot.sessions.service import SessionService


async def main(folder: Path) -> None:
    sessions = SessionService(folder)
    session = await sessions.get_or_create("telegram", "42")
    number = len(session.messages)
    while True:
        number += 1
        # Vary the size so the rewrite sometimes shrinks and sometimes grows the file.
        await sessions.append_messages(session, [Message.user(f"message {number} " + "x" * (number % 700))])
        if len(session.messages) > 60:
            del session.messages[:30]  # stands in for compaction: the live file stays bounded
        if number % 10 == 1:
            # Only after a save, so every run adds to the archive before it can be killed.
            print("saving", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

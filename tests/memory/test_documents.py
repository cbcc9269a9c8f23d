"""MEMORY.md and the daily notes behave the same in each store: the scope's files and PostgreSQL.

Each test runs on both (`documents`): writes and reads, a hand edit seen on the next read, note lines
appended by two writers at once (two replicas), an exchange taken out of a note, writes refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.memory.daily_notes import DailyNotes
from bot.memory.documents import MemoryDocuments, MemoryFiles
from bot.memory.long_term import LongTermMemory
from bot.memory.postgres_documents import MemoryDocumentRows
from bot.workspace import MemoryPaths
from tests.postgres_server import OpenDatabases

DAY = date(2026, 11, 26)


@dataclass
class DocumentsCase:
    open: Callable[[], Awaitable[MemoryDocuments]]  # another reader or writer of the same scope
    edit_by_hand: Callable[[str, str], Awaitable[None]]  # (name, the whole new text)
    refuse_writes: Callable[[], Awaitable[None]]


@pytest.fixture(params=["files", "postgres"])
async def documents(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DocumentsCase]:
    if request.param == "files":
        paths = MemoryPaths(tmp_path / "memory")

        async def files() -> MemoryDocuments:
            return MemoryFiles(paths)

        async def edit_file(name: str, text: str) -> None:
            paths.root.mkdir(parents=True, exist_ok=True)
            (paths.root / name).write_text(text)

        async def read_only() -> None:
            paths.root.mkdir(parents=True, exist_ok=True)
            for name in ("MEMORY.md", f"{DAY.isoformat()}.md"):
                (paths.root / name).unlink(missing_ok=True)
                (paths.root / name).mkdir()  # a folder where the file goes: every write fails

        yield DocumentsCase(files, edit_file, read_only)
        return
    url: str = request.getfixturevalue("postgres_database")
    connection = await asyncpg.connect(url)
    databases = OpenDatabases(url)

    async def rows() -> MemoryDocuments:
        return MemoryDocumentRows(await databases.open(), "chats/telegram:1")

    async def edit_row(name: str, text: str) -> None:
        await connection.execute(
            "INSERT INTO memory_documents (scope, name, content) VALUES ('chats/telegram:1', $1, $2)"
            " ON CONFLICT (scope, name) DO UPDATE SET content = excluded.content",
            name, text,
        )  # fmt: skip

    async def refuse() -> None:
        await connection.execute("ALTER TABLE memory_documents ADD CONSTRAINT refused CHECK (false) NOT VALID")

    try:
        await rows()  # the schema, before the table is emptied
        await connection.execute("ALTER TABLE memory_documents DROP CONSTRAINT IF EXISTS refused")
        await connection.execute("TRUNCATE memory_documents")
        yield DocumentsCase(rows, edit_row, refuse)
    finally:
        await databases.close()
        await connection.close()


async def test_memory_md_is_written_replaced_and_a_hand_edit_is_read_next_time(documents: DocumentsCase) -> None:
    memory = LongTermMemory(await documents.open())
    assert await memory.read() == ""
    await memory.write("# Facts\n- the owner's sister lives in Lisbon")
    await memory.append("- the owner drinks tea")
    assert await memory.replace("Lisbon", "Porto")
    assert not await memory.replace("Madrid", "Paris")
    assert await LongTermMemory(await documents.open()).read() == (
        "# Facts\n- the owner's sister lives in Porto\n- the owner drinks tea"
    )
    await documents.edit_by_hand("MEMORY.md", "<!-- a note to myself -->\n# Facts\n- edited by hand\n")
    assert await memory.read() == "<!-- a note to myself -->\n# Facts\n- edited by hand"
    assert await memory.for_model() == "# Facts\n- edited by hand"


async def test_note_lines_from_two_writers_at_once_are_all_kept(documents: DocumentsCase) -> None:
    first, second = DailyNotes(await documents.open()), DailyNotes(await documents.open())
    at = datetime(2026, 11, 26, 9, 30)
    await asyncio.gather(
        *(first.append(at, f"question {n}", "answer") for n in range(20)),
        *(second.append(at, f"other {n}", "reply") for n in range(20)),
    )
    [text] = await first.read_days([DAY])
    assert isinstance(text, str)
    lines = text.splitlines()
    assert len(lines) == 40 and all(line.startswith("[09:30] User: ") for line in lines)
    assert {line.split("User: ")[1].split(" |")[0] for line in lines} == {
        *(f"question {n}" for n in range(20)),
        *(f"other {n}" for n in range(20)),
    }


async def test_an_exchange_is_taken_out_of_a_hand_edited_note_and_the_rest_stays(documents: DocumentsCase) -> None:
    notes = DailyNotes(await documents.open())
    # A hand edit: a line of the owner's own before the bot's.
    await documents.edit_by_hand(f"{DAY.isoformat()}.md", "my own line\n[08:00] User: hi | Assistant: hello\n")
    await notes.append(datetime(2026, 11, 26, 9, 0), "what is on today?", "the dentist at ten")
    assert await notes.remove_exchange([DAY], "hi", "hello")
    assert not await notes.remove_exchange([DAY], "never said", "never answered")
    assert await DailyNotes(await documents.open()).read_days([DAY, date(2026, 11, 25)]) == [
        "my own line\n[09:00] User: what is on today? | Assistant: the dentist at ten",
        "",
    ]


async def test_a_store_that_refuses_writes_raises_and_keeps_what_it_had(documents: DocumentsCase) -> None:
    memory = LongTermMemory(await documents.open())
    notes = DailyNotes(await documents.open())
    await documents.refuse_writes()
    with pytest.raises(OSError):
        await memory.write("lost?")
    with pytest.raises(OSError):
        await notes.append(datetime(2026, 11, 26, 9, 0), "q", "a")

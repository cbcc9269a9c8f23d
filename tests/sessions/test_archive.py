"""`MessageArchive` on its own: append-only history, read back once per message, torn lines skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.domain.message import Message
from bot.sessions.archive import MessageArchive, lines_of


async def test_appends_read_back_in_order_and_a_message_stored_twice_reads_once(tmp_path: Path) -> None:
    archive = MessageArchive(tmp_path)
    first, second = Message(role="user", content="hi"), Message(role="assistant", content="hello")
    size = await archive.append("telegram:1", [first])
    assert size == archive.size_sync("telegram:1") == archive.path_for("telegram:1").stat().st_size
    # A crash between the archive's append and the session's save: the restart stores `first` again.
    await archive.append("telegram:1", [first, second])
    assert [m.id for m in await archive.read("telegram:1")] == [first.id, second.id]
    assert await archive.read("telegram:2") == []


async def test_reading_from_an_offset_gives_what_was_appended_after_it(tmp_path: Path) -> None:
    archive = MessageArchive(tmp_path)
    old, new = Message(role="user", content="old"), Message(role="user", content="new")
    offset = await archive.append("telegram:1", [old])
    await archive.append_lines("telegram:1", lines_of([new]))
    assert [m.content for m in archive.read_from_sync("telegram:1", offset)] == ["new"]
    assert [m.content for m in archive.read_from_sync("telegram:1", 0)] == ["old", "new"]


async def test_a_torn_last_line_and_a_record_that_is_no_message_are_skipped(tmp_path: Path) -> None:
    archive = MessageArchive(tmp_path)
    kept = Message(role="user", content="kept")
    await archive.append("telegram:1", [kept])
    with archive.path_for("telegram:1").open("a") as file:
        file.write('{"not": "a message"}\n{"id": "torn", "role": "us')
    assert archive.size_sync("telegram:1") < archive.path_for("telegram:1").stat().st_size
    assert [m.id for m in await archive.read("telegram:1")] == [kept.id]
    # The next append starts after the last whole line: the torn one is cut off, the new one reads.
    after = Message(role="assistant", content="after")
    await archive.append("telegram:1", [after])
    assert [m.id for m in await archive.read("telegram:1")] == [kept.id, after.id]


def test_a_session_id_that_is_no_file_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        MessageArchive(tmp_path).path_for("../escape")

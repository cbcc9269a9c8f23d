"""A long session's file is rewritten every so many turns; the archive holds the turns in between, and
loading the session reads them back, so nothing is lost and the bytes written per turn stay flat."""

from __future__ import annotations

import json
from pathlib import Path

from bot.domain.message import Message
from bot.sessions.rewrites import REWRITE_AFTER_SHARE, REWRITE_EVERY_SAVE_BELOW_BYTES
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles
from bot.storage.durability import DeferredSync
from tests.sessions.files import sessions_files

# Messages of about 300 bytes on disk: 1,200 of them make a file past `REWRITE_EVERY_SAVE_BELOW_BYTES`.
LONG = 1200


def exchange(number: int) -> list[Message]:
    return [
        Message.user(f"question {number}: " + "what about the garden shed and the keys? " * 5),
        Message.assistant(f"answer {number}: " + "under the blue pot, as always. " * 6),
    ]


async def long_session(folder: Path) -> tuple[SessionService, Path]:
    sessions = SessionService(SessionFiles(folder))
    session = await sessions.get_or_create("telegram", "1")
    for number in range(LONG // 2):
        sessions.add_unwritten(session, exchange(number))
    await sessions.save(session)  # written once, short: the next save writes the archive's length in it
    await sessions.append_messages(session, exchange(LONG // 2))
    path = sessions_files(sessions).store.path_for(session.id)
    assert path.stat().st_size > REWRITE_EVERY_SAVE_BELOW_BYTES
    return sessions, path


def contents(messages: list[Message]) -> list[str]:
    return [message.content for message in messages]


async def test_a_long_session_is_read_back_whole_with_the_turns_its_file_does_not_hold(tmp_path: Path) -> None:
    sessions, path = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    written = path.read_bytes()
    for number in range(1000, 1020):
        await sessions.append_messages(session, exchange(number))

    assert path.read_bytes() == written  # twenty turns, one archive append each, no rewrite
    assert json.loads(written)["metadata"]["archivedBytes"] > 0
    restarted = await SessionService(SessionFiles(tmp_path)).get_or_create("telegram", "1")
    assert contents(restarted.messages) == contents(session.messages)
    assert len(restarted.messages) == LONG + 2 + 40
    assert [m.id for m in restarted.messages] == [m.id for m in session.messages]


async def test_the_file_is_rewritten_once_the_archive_grew_by_a_share_of_it(tmp_path: Path) -> None:
    sessions, path = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    file_bytes = path.stat().st_size
    turn_bytes = sum(len(json.dumps(m.to_json_dict(), ensure_ascii=False)) + 1 for m in exchange(1000))
    expected_turns = file_bytes * REWRITE_AFTER_SHARE / turn_bytes

    turns = 0
    while path.stat().st_size == file_bytes:
        turns += 1
        await sessions.append_messages(session, exchange(1000 + turns))
        assert turns < 2 * expected_turns
    assert turns >= 0.8 * expected_turns
    assert len(json.loads(path.read_text())["messages"]) == len(session.messages)


async def test_a_change_that_is_not_an_append_is_written_at_once(tmp_path: Path) -> None:
    sessions, path = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, exchange(1000))

    kept = session.messages[-10:]
    await sessions.replace_messages(session, kept)  # a compaction
    assert contents([Message.model_validate(m) for m in json.loads(path.read_text())["messages"]]) == contents(kept)

    session.metadata.active_skill = "trip-planning"
    await sessions.save(session)
    assert json.loads(path.read_text())["metadata"]["activeSkill"] == "trip-planning"


async def test_messages_compacted_away_never_come_back(tmp_path: Path) -> None:
    sessions, _ = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    for number in range(1000, 1010):
        await sessions.append_messages(session, exchange(number))
    # Long still after the compaction, so the turns after it are again left to the archive.
    await sessions.replace_messages(session, session.messages[-(LONG - 100) :])
    for number in range(2000, 2010):
        await sessions.append_messages(session, exchange(number))

    restarted = await SessionService(SessionFiles(tmp_path)).get_or_create("telegram", "1")
    assert contents(restarted.messages) == contents(session.messages)


async def test_a_torn_archive_tail_costs_nothing_that_was_saved(tmp_path: Path) -> None:
    sessions, _ = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    for number in range(1000, 1005):
        await sessions.append_messages(session, exchange(number))
    archive = sessions_files(sessions).archive.path_for(session.id)
    with archive.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "torn", "role": "user", "content": "a crash cut th')

    restarted = SessionService(SessionFiles(tmp_path))
    again = await restarted.get_or_create("telegram", "1")
    assert contents(again.messages) == contents(session.messages)
    await restarted.append_messages(again, exchange(3000))  # cuts the torn tail off, then appends

    third = await SessionService(SessionFiles(tmp_path)).get_or_create("telegram", "1")
    assert contents(third.messages) == contents(session.messages) + contents(exchange(3000))


async def test_a_stop_brings_the_file_up_to_date(tmp_path: Path) -> None:
    sessions, path = await long_session(tmp_path)
    session = await sessions.get_or_create("telegram", "1")
    for number in range(1000, 1005):
        await sessions.append_messages(session, exchange(number))
    session.metadata.last_usage = {"promptTokens": 4321}
    assert len(json.loads(path.read_text())["messages"]) < len(session.messages)

    await sessions.write_unwritten()

    on_disk = json.loads(path.read_text())
    assert len(on_disk["messages"]) == len(session.messages)
    assert on_disk["metadata"]["lastUsage"] == {"promptTokens": 4321}


async def test_a_short_session_file_is_current_after_every_save(tmp_path: Path) -> None:
    sessions = SessionService(SessionFiles(tmp_path), DeferredSync())
    session = await sessions.get_or_create("telegram", "2")
    path = sessions_files(sessions).store.path_for(session.id)
    for number in range(30):
        await sessions.append_messages(session, exchange(number))
        on_disk = json.loads(path.read_text())
        assert len(on_disk["messages"]) == len(session.messages)
        # What the archive held when the file was written: a file a power cut left behind catches up from there.
        assert (
            on_disk["metadata"]["archivedBytes"] == sessions_files(sessions).archive.path_for(session.id).stat().st_size
        )


async def test_a_session_file_a_power_cut_left_behind_catches_up_from_the_archive(tmp_path: Path) -> None:
    """Only the archive append of a turn waits for its fsync; a power cut may leave the session file as
    it was some turns before (whole: it is replaced by a rename). Those turns come back from the archive."""
    deferred = DeferredSync()
    sessions = SessionService(SessionFiles(tmp_path), deferred)
    session = await sessions.get_or_create("telegram", "3")
    path = sessions_files(sessions).store.path_for(session.id)
    for number in range(5):
        await sessions.append_messages(session, exchange(number))
    left_behind = path.read_bytes()
    for number in range(5, 8):
        await sessions.append_messages(session, exchange(number))
    assert deferred.pending > 0  # the rewrites after appends wait for the next round of fsyncs
    path.write_bytes(left_behind)  # what the disk holds after a power cut before that round

    restarted = await SessionService(SessionFiles(tmp_path)).get_or_create("telegram", "3")
    assert contents(restarted.messages) == contents(session.messages)
    await deferred.sync()
    assert deferred.pending == 0


async def test_a_change_that_is_not_an_append_does_not_wait_for_a_later_fsync(tmp_path: Path) -> None:
    deferred = DeferredSync()
    sessions = SessionService(SessionFiles(tmp_path), deferred)
    session = await sessions.get_or_create("telegram", "4")
    for number in range(3):
        await sessions.append_messages(session, exchange(number))
    await deferred.sync()

    await sessions.replace_messages(session, session.messages[-2:])  # a compaction: not in the archive
    assert deferred.pending == 0
    await sessions.append_messages(session, exchange(3))
    assert deferred.pending > 0

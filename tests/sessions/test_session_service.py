"""SessionService: the session file, the append-only archive, caching and recovery."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.domain.message import Message, Role, ToolCall
from bot.domain.session import InvalidSessionId, topic_chat_id, whole_chat_session_id
from bot.sessions import service as session_service
from bot.sessions.service import SessionPersistError, SessionService
from bot.sessions.storage import SessionFiles
from tests.sessions.files import sessions_files


@pytest.fixture
def sessions(tmp_path: Path) -> SessionService:
    return SessionService(SessionFiles(tmp_path / "sessions"))


async def test_session_file_has_the_contract_shape(sessions: SessionService, tmp_path: Path) -> None:
    session = await sessions.get_or_create("telegram", "12345")
    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "notes.md"}')
    await sessions.append_messages(
        session,
        [
            Message.user("hi"),
            Message.assistant("", tool_calls=[call]),
            Message.tool_result(call, "file text"),
            Message.assistant("done"),
        ],
    )
    stored = json.loads((tmp_path / "sessions" / "telegram:12345.json").read_text())
    assert stored["id"] == "telegram:12345"
    assert stored["channelType"] == "telegram" and stored["chatId"] == "12345"
    assert stored["state"] == "ACTIVE"
    assert {"createdAt", "updatedAt", "metadata", "messages"} <= stored.keys()
    roles = [m["role"] for m in stored["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert all({"id", "role", "content", "timestamp"} <= m.keys() for m in stored["messages"])
    assert stored["messages"][1]["toolCalls"] == [
        {"id": "call_1", "name": "read_file", "arguments": '{"path": "notes.md"}'}
    ]
    assert stored["messages"][2]["toolCallId"] == "call_1" and stored["messages"][2]["name"] == "read_file"


async def test_a_restart_loads_what_was_saved(tmp_path: Path) -> None:
    first = SessionService(SessionFiles(tmp_path / "sessions"))
    session = await first.get_or_create("console", "local")
    await first.append_messages(session, [Message.user("remember me"), Message.assistant("sure")])

    second = SessionService(SessionFiles(tmp_path / "sessions"))
    reloaded = await second.get_or_create("console", "local")
    assert [m.content for m in reloaded.messages] == ["remember me", "sure"]
    assert reloaded.messages[0].role is Role.USER
    assert await second.message_count("console:local") == 2


async def test_clear_keeps_the_archive(sessions: SessionService) -> None:
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("a"), Message.assistant("b")])
    assert await sessions.clear_messages(session) == 2
    assert await sessions.message_count(session.id) == 0
    assert [m.content for m in await sessions.read_archive(session.id)] == ["a", "b"]


async def test_delete_removes_the_file(sessions: SessionService, tmp_path: Path) -> None:
    session = await sessions.get_or_create("telegram", "1")
    await sessions.save(session)
    await sessions.delete(session.id)
    assert not (tmp_path / "sessions" / "telegram:1.json").exists()
    assert await sessions.get(session.id) is None


async def test_torn_archive_line_is_skipped_then_repaired(sessions: SessionService, tmp_path: Path) -> None:
    session = await sessions.get_or_create("telegram", "7")
    await sessions.append_messages(session, [Message.user("whole")])
    archive = tmp_path / "sessions" / "archive" / "telegram:7.jsonl"
    with archive.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "x", "role": "user", "content": "cut sh')  # a crash mid-append
    assert [m.content for m in await sessions.read_archive(session.id)] == ["whole"]

    await sessions.append_messages(session, [Message.user("after")])
    lines = archive.read_text().splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["whole", "after"]


async def test_a_message_stored_again_after_a_crash_is_read_once(sessions: SessionService, tmp_path: Path) -> None:
    # A crash after the archive append and before the session save: the restart stores the message again.
    question = Message.user("is it raining?", "journal-1")
    session = await sessions.get_or_create("telegram", "8")
    await sessions_files(sessions).archive.append(session.id, [question])
    await sessions.append_messages(session, [question, Message.assistant("No.")])
    assert len((tmp_path / "sessions" / "archive" / "telegram:8.jsonl").read_text().splitlines()) == 3
    assert [m.content for m in await sessions.read_archive(session.id)] == ["is it raining?", "No."]


async def test_corrupt_session_is_quarantined_and_a_fresh_one_started(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "telegram:9.json").write_text('{"id": "telegram:9", "messages": [')
    sessions = SessionService(SessionFiles(folder))
    session = await sessions.get_or_create("telegram", "9")
    assert session.messages == []
    quarantined = list(folder.glob("telegram:9.json.corrupt-*"))
    assert len(quarantined) == 1
    assert quarantined[0].read_text() == '{"id": "telegram:9", "messages": ['
    assert session.metadata.recovered_from == quarantined[0].name


async def test_lone_surrogates_are_stored_safely(sessions: SessionService) -> None:
    session = await sessions.get_or_create("telegram", "5")
    await sessions.append_messages(session, [Message.user("bad \ud800 text 👩‍👩‍👧")])
    reloaded = await SessionService(SessionFiles(sessions_files(sessions).store.path_for("x:y").parent)).get_or_create(
        "telegram", "5"
    )
    assert reloaded.messages[0].content == "bad \ufffd text 👩‍👩‍👧"


@pytest.mark.parametrize(
    "chat_id", ["../etc", "a/b", "", "..", "x\0", "-100:topic:", "-100:topic:../x", "-1:topic:2:topic:3"]
)
async def test_chat_ids_that_could_escape_the_folder_are_refused(sessions: SessionService, chat_id: str) -> None:
    with pytest.raises(InvalidSessionId):
        await sessions.get_or_create("telegram", chat_id)


async def test_a_forum_topic_has_a_session_and_an_archive_of_its_own(sessions: SessionService, tmp_path: Path) -> None:
    topic = await sessions.get_or_create("telegram", topic_chat_id("-1001234567", "42"))
    await sessions.append_messages(topic, [Message.user("in the topic")])
    group = await sessions.get_or_create("telegram", topic_chat_id("-1001234567", None))
    assert (topic.id, group.id, group.messages) == ("telegram:-1001234567:topic:42", "telegram:-1001234567", [])
    assert whole_chat_session_id(topic.id) == group.id == whole_chat_session_id(group.id)
    assert (tmp_path / "sessions" / "archive" / "telegram:-1001234567:topic:42.jsonl").is_file()


async def test_saving_does_not_read_the_archive(sessions: SessionService, tmp_path: Path) -> None:
    """Persisting a message appends to the archive and rewrites only the live session."""
    session = await sessions.get_or_create("telegram", "8")
    await sessions.append_messages(session, [Message.user(f"m{i}") for i in range(500)])
    await sessions.clear_messages(session)
    archive = tmp_path / "sessions" / "archive" / "telegram:8.jsonl"
    archive_size = archive.stat().st_size
    await sessions.append_messages(session, [Message.user("one more")])
    live = tmp_path / "sessions" / "telegram:8.json"
    assert live.stat().st_size < 1000  # the live file holds one message, not the history
    assert archive.stat().st_size > archive_size
    assert len(archive.read_text().splitlines()) == 501


async def test_the_cache_keeps_the_most_recent_chats_and_reads_older_ones_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_service, "CACHE_MAX_SESSIONS", 3)
    sessions = SessionService(SessionFiles(tmp_path / "sessions"))
    for chat in range(10):
        session = await sessions.get_or_create("telegram", str(chat))
        await sessions.append_messages(session, [Message.user(f"hello from chat {chat}")])
    del session
    gc.collect()
    assert [s.chat_id for s in sessions.cached()] == ["7", "8", "9"]
    again = await sessions.get_or_create("telegram", "0")  # dropped: read back from its file
    assert [m.content for m in again.messages] == ["hello from chat 0"]
    assert [s.chat_id for s in sessions.cached()] == ["8", "9", "0"]


async def test_a_session_still_in_use_is_never_loaded_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_service, "CACHE_MAX_SESSIONS", 1)
    sessions = SessionService(SessionFiles(tmp_path / "sessions"))
    held = await sessions.get_or_create("telegram", "1")  # a run holds it...
    await sessions.append_messages(held, [Message.user("first")])
    await sessions.get_or_create("telegram", "2")  # ...while another chat pushes it out of the cache
    assert [s.chat_id for s in sessions.cached()] == ["2"]
    assert await sessions.get_or_create("telegram", "1") is held


async def test_a_session_whose_save_failed_is_kept_until_a_save_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_service, "CACHE_MAX_SESSIONS", 1)
    sessions = SessionService(SessionFiles(tmp_path / "sessions"))
    session = await sessions.get_or_create("telegram", "1")
    await sessions.append_messages(session, [Message.user("kept on disk")])
    target = sessions_files(sessions).store.path_for(session.id)
    target.unlink()
    target.mkdir()  # the next rewrite cannot replace it (as root, permissions would not stop it)
    with pytest.raises(SessionPersistError):
        await sessions.append_messages(session, [Message.user("only in memory")])
    target.rmdir()
    del session
    await sessions.get_or_create("telegram", "2")
    gc.collect()
    again = await sessions.get_or_create("telegram", "1")  # the unwritten message is not lost
    assert [m.content for m in again.messages] == ["kept on disk", "only in memory"]


def stored_json(tmp_path: Path, session_id: str) -> str:
    return (tmp_path / "sessions" / f"{session_id}.json").read_text()


async def test_each_save_writes_the_document_pydantic_would_whatever_changed_since(
    sessions: SessionService, tmp_path: Path
) -> None:
    session = await sessions.get_or_create("telegram", "7")
    call = ToolCall(id="call_1", name="read_file", arguments="{}")
    await sessions.append_messages(session, [Message.user("hi"), Message.assistant("", tool_calls=[call])])
    with pytest.raises(ValidationError):  # a stored message is never edited in place: what it was stays true
        session.messages[0].content = "hi, edited after its save"  # type: ignore[misc]
    session.messages[1] = Message.assistant("replaced")  # a message put in another's place is caught
    session.metadata.last_usage = {"promptTokens": 12}
    await sessions.append_messages(session, [Message.tool_result(call, "file text")])
    expected = session.model_dump_json(by_alias=True, exclude_none=True)
    assert stored_json(tmp_path, session.id) == expected
    assert "replaced" in expected
    await sessions.replace_messages(session, session.messages[1:])
    assert stored_json(tmp_path, session.id) == session.model_dump_json(by_alias=True, exclude_none=True)


async def test_messages_added_unwritten_go_out_with_the_next_save(sessions: SessionService, tmp_path: Path) -> None:
    session = await sessions.get_or_create("telegram", "8")
    question = Message.user("what is on today?")
    sessions.add_unwritten(session, [question])
    assert sessions.has_unwritten(session)
    assert not (tmp_path / "sessions" / f"{session.id}.json").exists()
    assert await sessions.read_archive(session.id) == []
    await sessions.append_messages(session, [Message.assistant("the dentist at ten")])
    assert not sessions.has_unwritten(session)
    on_disk = json.loads(stored_json(tmp_path, session.id))
    assert [m["content"] for m in on_disk["messages"]] == ["what is on today?", "the dentist at ten"]
    assert [m.content for m in await sessions.read_archive(session.id)] == ["what is on today?", "the dentist at ten"]


async def test_a_stop_writes_what_was_added_unwritten(sessions: SessionService, tmp_path: Path) -> None:
    session = await sessions.get_or_create("telegram", "9")
    sessions.add_unwritten(session, [Message.user("a question the stop cut short")])
    await sessions.write_unwritten()
    on_disk = json.loads(stored_json(tmp_path, session.id))
    assert [m["content"] for m in on_disk["messages"]] == ["a question the stop cut short"]
    assert len(await sessions.read_archive(session.id)) == 1

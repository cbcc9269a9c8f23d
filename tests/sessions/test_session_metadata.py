"""Session metadata: typed in code, the same bytes on disk, and a hand-edited file never loses the session."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from bot.app import Application
from bot.domain.session import AgentSession
from bot.sessions.store import SessionFileStore
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

# A session file as the bot wrote it before its metadata was typed: every key, in the order a chat set them.
WRITTEN_BY_THE_BOT = Path(__file__).parent / "fixtures" / "session_written_by_the_bot.json"


async def say(services: Application, channel: RecordingChannel, text: str) -> str:
    before = len(channel.sent["1"])
    await services.router.accept(channel.message("1", text), channel)
    return (await channel.wait_for("1", before + 1))[-1]


def hand_edited_session(workspace: Path, metadata: object) -> Path:
    """The session file of chat `test:1` with one exchange and the given metadata, as a user left it."""
    path = workspace / "sessions" / "test:1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(WRITTEN_BY_THE_BOT.read_text())
    stored.update(id="test:1", channelType="test", chatId="1", metadata=metadata)
    stored["messages"] = [
        {"id": "u1", "role": "user", "content": "My sister is called ALMA.", "timestamp": "2026-03-01T09:30:00Z"},
        {"id": "a1", "role": "assistant", "content": "Noted.", "timestamp": "2026-03-01T09:30:01Z"},
    ]
    path.write_text(json.dumps(stored))
    return path


def loaded(store: SessionFileStore, session_id: str) -> AgentSession | None:
    stored = store.load_sync(session_id)
    return None if stored is None else stored[0]


async def save(store: SessionFileStore, session: AgentSession) -> None:
    await store.write(session.id, store.document(session))


async def test_a_file_the_bot_wrote_is_read_typed_and_written_back_byte_for_byte(tmp_path: Path) -> None:
    shutil.copy(WRITTEN_BY_THE_BOT, tmp_path / "telegram:12345.json")
    store = SessionFileStore(tmp_path)

    session = loaded(store, "telegram:12345")

    assert session is not None
    metadata = session.metadata
    assert metadata.is_group and metadata.active_skill == "trip-planning"
    # A key the bot no longer writes (the turn ledger took it over) is kept as it was.
    assert (metadata.model_extra or {})["settledUserMessage"] == "m1"
    assert metadata.compaction_count == 2 and metadata.messages_dropped_without_summary == 12
    assert metadata.summary == "## Goal\nPlan the trip to Lisbon."
    assert metadata.last_usage == {
        "promptTokens": 3310,
        "completionTokens": 42,
        "cachedTokens": 1024,
        "model": "gpt-4o-mini",
    }
    assert [event.get("status") for event in metadata.compaction_events] == ["completed", "failed"]
    assert (metadata.last_prompt_tokens or {})["cut"] == ["memoryPack"]
    await save(store, session)
    assert (tmp_path / "telegram:12345.json").read_bytes() == WRITTEN_BY_THE_BOT.read_bytes()


async def test_a_conversation_and_its_compaction_are_written_back_unchanged_after_a_restart(
    services: Application, channel: RecordingChannel, workspace_dir: Path
) -> None:
    await say(services, channel, "My sister is called ALMA.")
    await say(services, channel, "She lives in Porto.")
    await say(services, channel, "/compact 2")
    await say(services, channel, "Where does she live?")
    path = workspace_dir / "sessions" / "test:1.json"
    written = path.read_bytes()
    metadata = json.loads(written)["metadata"]
    assert metadata["compactionCount"] == 1 and "lastUsage" in metadata and "lastPromptTokens" in metadata

    store = SessionFileStore(path.parent)  # a restart reads the file again
    session = loaded(store, "test:1")
    assert session is not None and session.metadata.compaction_count == 1
    await save(store, session)
    assert path.read_bytes() == written


async def test_a_key_this_version_does_not_know_is_kept_where_it_was(
    services: Application, channel: RecordingChannel, workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    path = hand_edited_session(workspace_dir, {"mood": {"today": "sunny", "scores": [1, 2]}, "compactionCount": 3})

    await say(services, channel, "What is my sister called?")

    assert "ALMA" in json.dumps(fake_openai.last_chat_request()["messages"])  # the session was kept
    metadata = json.loads(path.read_text())["metadata"]
    assert list(metadata)[:2] == ["mood", "compactionCount"]
    assert metadata["mood"] == {"today": "sunny", "scores": [1, 2]} and metadata["compactionCount"] == 3
    assert metadata["lastUsage"]["model"]  # what this turn added comes after


async def test_a_value_of_the_wrong_type_is_dropped_to_its_default_with_one_warning(
    services: Application,
    channel: RecordingChannel,
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = hand_edited_session(
        workspace_dir,
        {"summary": "kept", "compactionCount": "many", "lastUsage": [1, 2], "isGroup": "maybe", "activeSkill": None},
    )

    with caplog.at_level(logging.WARNING):
        reply = await say(services, channel, "What is my sister called?")
        await say(services, channel, "/status")

    assert reply and "ALMA" in json.dumps(fake_openai.last_chat_request()["messages"])
    warnings = [r.getMessage() for r in caplog.records if "metadata key" in r.getMessage()]
    assert len(warnings) == 3
    for key in ("compactionCount", "lastUsage", "isGroup"):
        [line] = [warning for warning in warnings if repr(key) in warning]
        assert str(path) in line
    metadata = json.loads(path.read_text())["metadata"]
    assert metadata["summary"] == "kept"
    assert "compactionCount" not in metadata and "isGroup" not in metadata and "activeSkill" not in metadata
    assert metadata["lastUsage"]["promptTokens"] > 0  # the turn's own usage, in place of the bad value


async def test_metadata_that_is_not_an_object_does_not_lose_the_session(
    services: Application, channel: RecordingChannel, workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    path = hand_edited_session(workspace_dir, ["not", "an", "object"])

    await say(services, channel, "What is my sister called?")

    assert "ALMA" in json.dumps(fake_openai.last_chat_request()["messages"])
    assert isinstance(json.loads(path.read_text())["metadata"], dict)


async def test_a_value_back_at_its_default_leaves_the_file(tmp_path: Path) -> None:
    store = SessionFileStore(tmp_path)
    session = AgentSession.new("telegram", "1")
    await save(store, session)
    assert json.loads((tmp_path / "telegram:1.json").read_text())["metadata"] == {}
    session.metadata.active_skill = "trip-planning"
    session.metadata.compaction_count = 1
    await save(store, session)
    assert json.loads((tmp_path / "telegram:1.json").read_text())["metadata"] == {
        "activeSkill": "trip-planning",
        "compactionCount": 1,
    }
    session.metadata.active_skill = None  # /skill off
    session.metadata.active_skill = "packing"  # set again: it goes last, as a key set anew in a dict
    session.metadata.compaction_count = 0
    await save(store, session)
    assert (tmp_path / "telegram:1.json").read_text().count('"metadata":{"activeSkill":"packing"}') == 1

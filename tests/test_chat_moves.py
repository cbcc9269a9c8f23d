"""A Telegram group upgraded to a supergroup: its conversation, memory and reminders go along to the new id.

Telegram does it when the bot is made an admin, when the history is made visible to new members, at 200
members: the old group gets a service message with `migrate_to_chat_id`, the new one a message with
`migrate_from_chat_id`, messages come from the new id, and a send to the old one is refused with 400 and
`parameters.migrate_to_chat_id` (the fake Bot API does all of it, `FakeTelegram.upgrade_group`).
"""

from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta
from pathlib import Path

from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.scheduler.reminder_store import Reminder, ReminderFile
from bot.storage.jsonl import dumps_line
from tests.channels.telegram_harness import start_bot
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import GROUP_UPGRADED, FakeTelegram
from tests.rag.helpers import lightrag_responder
from tests.rag.test_documents import MARTA, RAG, wait_for_text

GROUP = -4001  # a basic group
SUPERGROUP = -1004001  # what it becomes
OLD, NEW = f"telegram:{GROUP}", f"telegram:{SUPERGROUP}"


def conversation_users(fake_openai: FakeOpenAI) -> list[str]:
    """The user turns of the last conversation request."""
    return [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]


async def ask(fake_telegram: FakeTelegram, chat: int, text: str) -> str:
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, text)
    return (await fake_telegram.await_messages(chat, before + 1))[-1].text


async def group_reads_marta(fake_telegram: FakeTelegram) -> str:
    """A document sent to the bot in the group (a caption names it), read into the group's graph; its id."""
    fake_telegram.push_document(
        GROUP, content=MARTA.encode(), file_name="marta.txt", mime_type="text/plain", caption="@test_bot"
    )
    final = await wait_for_text(fake_telegram, "Read marta.txt: 1 part, in my memory now", chat=GROUP)
    return final.split("(id ")[1].split(")")[0]


async def ask_held(fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, text: str, reply: str) -> threading.Event:
    """`text` asked in the old group, its reply `reply` held by the model until the returned event is set."""
    release = threading.Event()
    fake_openai.script(Reply(reply, held_until=release))
    asked = len(fake_openai.chat_requests())
    fake_telegram.push_message(GROUP, text)
    await fake_telegram.await_until(lambda: len(fake_openai.chat_requests()) > asked, what="the model asked")
    return release


async def test_the_supergroup_goes_on_with_the_groups_conversation_and_memory(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        assert await ask(fake_telegram, GROUP, "@test_bot our picnic is on Saturday") == (
            "echo: User1001: our picnic is on Saturday"
        )
        old_memory = workspace_dir / "memory" / "chats" / OLD
        assert old_memory.is_dir()
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        assert await ask(fake_telegram, SUPERGROUP, "@test_bot when is the picnic?") == (
            "echo: User1001: when is the picnic?"
        )
        assert conversation_users(fake_openai) == [
            "User1001: our picnic is on Saturday",
            "User1001: when is the picnic?",
        ]
        await bot.app.chat_moves.settled()
    finally:
        await bot.stop()
    sessions = workspace_dir / "sessions"
    assert not (sessions / f"{OLD}.json").exists() and not (sessions / "archive" / f"{OLD}.jsonl").exists()
    stored = json.loads((sessions / f"{NEW}.json").read_text())
    assert (stored["id"], stored["chatId"]) == (NEW, str(SUPERGROUP))
    archived = (sessions / "archive" / f"{NEW}.jsonl").read_text()
    assert "our picnic is on Saturday" in archived and "when is the picnic?" in archived
    assert not old_memory.exists()
    notes = "".join(path.read_text() for path in (workspace_dir / "memory" / "chats" / NEW).glob("*.md"))
    assert "our picnic is on Saturday" in notes
    # Told twice (both service messages), the move was made once.
    moves = (workspace_dir / "state" / "chat_moves.jsonl").read_text().splitlines()
    assert [json.loads(line)["state"] for line in moves] == ["begun", "done"]


async def test_a_reply_the_old_group_refuses_is_sent_to_the_supergroup(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        release = await ask_held(fake_openai, fake_telegram, "@test_bot the picnic is on Saturday", "Saturday it is")
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        release.set()
        [reply] = await fake_telegram.await_messages(SUPERGROUP)
        assert reply.text == "Saturday it is"
        refused = [call for call in fake_telegram.calls_to("sendMessage") if call.params.get("chat_id") == GROUP]
        assert refused and all(GROUP_UPGRADED in (call.error or "") for call in refused)
        assert await ask(fake_telegram, SUPERGROUP, "@test_bot and the time?") == "echo: User1001: and the time?"
        assert conversation_users(fake_openai) == ["User1001: the picnic is on Saturday", "User1001: and the time?"]
    finally:
        await bot.stop()
    assert not (workspace_dir / "sessions" / f"{OLD}.json").exists()


async def test_a_move_a_crash_left_midway_is_finished_at_the_next_start(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    # The crash came after the archive was moved, before the session and the memory were: the move is recorded
    # begun, the archive already under the new id, the session file and the memory under the old one.
    question = Message.user("User1001: remember the gate code 4711", "m1")
    answer = Message.assistant("Noted: 4711").model_copy(update={"id": "m2"})
    session = AgentSession.new("telegram", str(GROUP))
    session.messages = [question, answer]
    sessions = workspace_dir / "sessions"
    (sessions / "archive").mkdir(parents=True)
    (sessions / f"{OLD}.json").write_text(session.model_dump_json(by_alias=True))
    (sessions / "archive" / f"{NEW}.jsonl").write_text(
        "".join(
            dumps_line(m.model_dump(mode="json", by_alias=True, exclude_none=True)) + "\n" for m in session.messages
        )
    )
    (workspace_dir / "memory" / "chats" / OLD).mkdir(parents=True)
    (workspace_dir / "memory" / "chats" / OLD / "MEMORY.md").write_text("The gate code is 4711.\n")
    reminders = ReminderFile(workspace_dir / "reminders.json")
    due = session.created_at + timedelta(days=1)
    await reminders.put(
        Reminder(session_id=OLD, channel_type="telegram", chat_id=str(GROUP), text="picnic", due_at=due)
    )
    state = workspace_dir / "state"
    state.mkdir()
    begun = {"channelType": "telegram", "oldChatId": str(GROUP), "newChatId": str(SUPERGROUP), "state": "begun"}
    (state / "chat_moves.jsonl").write_text(dumps_line(begun) + "\n")

    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, "ptb")
    try:
        assert (
            await ask(fake_telegram, SUPERGROUP, "@test_bot what is the code?") == "echo: User1001: what is the code?"
        )
        assert conversation_users(fake_openai) == [
            "User1001: remember the gate code 4711",
            "User1001: what is the code?",
        ]
        [reminder] = await bot.app.stores.reminders.of_session(NEW)
        assert (reminder.text, reminder.chat_id) == ("picnic", str(SUPERGROUP))
    finally:
        await bot.stop()
    assert not (sessions / f"{OLD}.json").exists()
    archived = [json.loads(line)["id"] for line in (sessions / "archive" / f"{NEW}.jsonl").read_text().splitlines()]
    assert archived[:2] == ["m1", "m2"] and len(archived) == len(set(archived))
    assert (workspace_dir / "memory" / "chats" / NEW / "MEMORY.md").read_text() == "The gate code is 4711.\n"


async def test_a_message_of_the_old_group_still_waiting_is_answered_in_the_supergroup(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        release = await ask_held(fake_openai, fake_telegram, "@test_bot the picnic is on Saturday", "noted")
        fake_telegram.push_message(GROUP, "@test_bot bring plates")  # waits behind the first
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        release.set()
        replies = await fake_telegram.await_messages(SUPERGROUP, 2)
        assert [reply.text for reply in replies] == ["noted", "echo: User1001: bring plates"]
        assert conversation_users(fake_openai) == ["User1001: the picnic is on Saturday", "User1001: bring plates"]
        await bot.app.chat_moves.settled()
    finally:
        await bot.stop()
    assert not (workspace_dir / "sessions" / f"{OLD}.json").exists()
    assert not (workspace_dir / "sessions" / "archive" / f"{OLD}.jsonl").exists()


async def test_a_turn_of_the_old_group_a_stop_left_open_is_answered_in_the_supergroup(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, "ptb")
    try:
        assert await ask(fake_telegram, GROUP, "@test_bot the picnic is on Saturday") == (
            "echo: User1001: the picnic is on Saturday"
        )
        await ask_held(fake_openai, fake_telegram, "@test_bot bring plates", "never sent")
    finally:
        await bot.stop()  # the second turn is left open
    fake_openai.reset()
    fake_telegram.upgrade_group(GROUP, SUPERGROUP)
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, "ptb")
    try:
        [reply] = await fake_telegram.await_messages(SUPERGROUP)
        assert reply.text == "echo: User1001: bring plates"
        assert await ask(fake_telegram, SUPERGROUP, "@test_bot and the time?") == "echo: User1001: and the time?"
        assert conversation_users(fake_openai) == [
            "User1001: the picnic is on Saturday", "User1001: bring plates", "User1001: and the time?"
        ]  # fmt: skip
        await bot.app.chat_moves.settled()
    finally:
        await bot.stop()
    assert not (workspace_dir / "sessions" / f"{OLD}.json").exists()


async def test_the_groups_photos_follow_it_to_the_supergroup(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    photo = b"\xff\xd8\xff\xe0" + b"a cat on a red sofa" * 40
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, "aiogram")
    try:
        fake_telegram.push_photo(GROUP, caption="@test_bot what is this?", content=photo)
        await fake_telegram.await_messages(GROUP)
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        assert await ask(fake_telegram, SUPERGROUP, "@test_bot and its colour?") == "echo: User1001: and its colour?"
        # The photo is still shown to the model, read from where it moved.
        assert fake_openai.image_urls() == [f"data:image/jpeg;base64,{base64.b64encode(photo).decode()}"]
        await bot.app.chat_moves.settled()
    finally:
        await bot.stop()
    assert not (workspace_dir / "media" / OLD).exists()
    [moved] = (workspace_dir / "media" / NEW).iterdir()
    stored = json.loads((workspace_dir / "sessions" / f"{NEW}.json").read_text())
    assert [ref["path"] for m in stored["messages"] for ref in m.get("media", [])] == [f"media/{NEW}/{moved.name}"]


async def test_the_groups_documents_and_knowledge_graph_are_the_supergroups(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.set_responder(lightrag_responder)
    # The caption's exchange is indexed at once too (not after the chat is quiet for minutes).
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, "ptb", {"rag": {**RAG, "idleFlushSeconds": 0}})
    try:
        upload_id = await group_reads_marta(fake_telegram)
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        # Recalled in the supergroup (its first message waits for the move), from the graph the group's reading
        # went into, and listed there.
        await ask(fake_telegram, SUPERGROUP, "@test_bot Where does Marta work?")
        system = fake_openai.system_prompts()[-1] or ""
        assert "Gulbenkian" in system.split("# Relevant Memory", 1)[-1]
        assert f"{upload_id} · marta.txt · 1 part · read" in await ask(fake_telegram, SUPERGROUP, "/docs")
        # And forgotten from it through the supergroup.
        forgotten = await ask(fake_telegram, SUPERGROUP, f"/docs forget {upload_id}")
        assert forgotten.startswith("Forgotten: marta.txt (1 part removed")
        await ask(fake_telegram, SUPERGROUP, "@test_bot Where does Marta work?")
        system = fake_openai.system_prompts()[-1] or ""
        assert "Gulbenkian" not in system
    finally:
        await bot.stop()
    uploads = [json.loads(line) for line in (workspace_dir / "rag" / "uploads.jsonl").read_text().splitlines()]
    assert [(upload["session_id"], upload["chat_id"], upload["status"]) for upload in uploads] == [
        (NEW, str(SUPERGROUP), "forgotten")
    ]  # fmt: skip


async def test_commands_of_the_old_group_and_right_after_the_upgrade_act_on_the_groups_conversation_and_documents(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    fake_openai.set_responder(lightrag_responder)
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, {"rag": {**RAG, "idleFlushSeconds": 0}})
    try:
        upload_id = await group_reads_marta(fake_telegram)
        await ask(fake_telegram, GROUP, "@test_bot our picnic is on Saturday")
        status = await ask(fake_telegram, GROUP, "/status")
        messages = next(line for line in status.splitlines() if line.startswith("Messages: "))
        listed = f"{upload_id} · marta.txt · 1 part · read"
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        # Sent in the supergroup at once, while the group's data is moving; then late messages of the old group,
        # whose answers go to the supergroup.
        for chat in (SUPERGROUP, GROUP):
            fake_telegram.push_message(chat, "/status")
            fake_telegram.push_message(chat, "/docs")
        replies = [reply.text for reply in await fake_telegram.await_messages(SUPERGROUP, 4)]
        statuses = [reply for reply in replies if reply.startswith("Session ")]
        assert [reply.splitlines()[0] for reply in statuses] == [f"Session {NEW} (ACTIVE)"] * 2
        assert all(messages in reply.splitlines() for reply in statuses), (messages, statuses)
        documents = [reply for reply in replies if not reply.startswith("Session ")]
        assert len(documents) == 2 and all(listed in reply for reply in documents), documents
    finally:
        await bot.stop()

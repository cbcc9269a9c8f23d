"""Forum topics end to end, once per backend (ptb, aiogram): a message asked in a topic of a forum supergroup
is answered in that topic, and each topic is a conversation of its own, while the group's memory stays the
group's."""

from __future__ import annotations

from typing import Any

from bot.domain.session import AgentSession
from tests.channels.telegram_harness import GROUP, RunningBot
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.telegram_server import FakeTelegram


async def ask_in(fake_telegram: FakeTelegram, topic: int | None, text: str) -> str:
    """Send `text` in a topic of the forum `GROUP` (None: its General topic) and return the bot's next reply."""
    before = len(fake_telegram.sent_messages(GROUP))
    fake_telegram.push_message(GROUP, text, thread_id=topic)
    return (await fake_telegram.await_messages(GROUP, before + 1))[-1].text


def said(request: dict[str, Any], role: str) -> list[str]:
    """The contents of a request's messages of one role."""
    return [m["content"] for m in request["messages"] if m["role"] == role]


def session(bot: RunningBot, chat_id: str) -> AgentSession:
    path = bot.workspace / "sessions" / f"telegram:{chat_id}.json"
    return AgentSession.model_validate_json(path.read_text(encoding="utf-8"))


async def test_the_reply_the_typing_a_file_and_a_commands_answer_go_to_the_topic_asked_in(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    trips = fake_telegram.open_topic(GROUP, "Trips")
    assert await ask_in(fake_telegram, trips, "@test_bot where to?") == "echo: User1001: where to?"
    assert "Messages: 2" in await ask_in(fake_telegram, trips, "/status@test_bot")
    fake_telegram.push_message(GROUP, "/export@test_bot", thread_id=trips)
    await fake_telegram.await_until(lambda: len(fake_telegram.sent_documents(GROUP)) == 1)
    assert fake_telegram.thread_ids("sendMessage", GROUP) == [trips, trips]
    assert fake_telegram.thread_ids("sendDocument", GROUP) == [trips]
    assert set(fake_telegram.thread_ids("sendChatAction", GROUP)) == {trips}
    # The General topic takes no thread id: its messages carry none, and neither do the answers.
    fake_telegram.reset_calls()
    assert await ask_in(fake_telegram, None, "@test_bot and here?") == "echo: User1001: and here?"
    assert fake_telegram.thread_ids("sendMessage", GROUP) == [None]
    assert set(fake_telegram.thread_ids("sendChatAction", GROUP)) == {None}


async def test_each_topic_is_a_conversation_of_its_own(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    trips, books = fake_telegram.open_topic(GROUP, "Trips"), fake_telegram.open_topic(GROUP, "Books")
    await ask_in(fake_telegram, trips, "@test_bot we fly to Oslo")
    await ask_in(fake_telegram, books, "@test_bot I read Dune")
    await ask_in(fake_telegram, None, "@test_bot hello all")
    await ask_in(fake_telegram, trips, "@test_bot when do we fly?")
    # The model is given the topic's conversation alone, and a topic's message is no reply to its opening.
    assert [said(request, "user") for request in fake_openai.conversation_requests()] == [
        ["User1001: we fly to Oslo"],
        ["User1001: I read Dune"],
        ["User1001: hello all"],
        ["User1001: we fly to Oslo", "User1001: when do we fly?"],
    ]
    # /new in one topic clears that topic only.
    assert "cleared" in (await ask_in(fake_telegram, trips, "/new@test_bot")).lower()
    assert session(bot, f"{GROUP}:topic:{trips}").messages == []
    assert [m.content for m in session(bot, f"{GROUP}:topic:{books}").messages] == [
        "I read Dune",
        "echo: User1001: I read Dune",
    ]
    # The General topic keeps the group's own session id, as a group without topics does.
    assert len(session(bot, str(GROUP)).messages) == 2
    assert (bot.workspace / "sessions" / "archive" / f"telegram:{GROUP}:topic:{books}.jsonl").is_file()


async def test_the_topics_share_the_groups_memory(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    trips, books = fake_telegram.open_topic(GROUP, "Trips"), fake_telegram.open_topic(GROUP, "Books")
    await ask_in(fake_telegram, trips, "@test_bot we fly to Oslo on Friday")
    await ask_in(fake_telegram, books, "@test_bot what do you know?")
    asked = fake_openai.conversation_requests()[-1]
    system = "\n".join(said(asked, "system"))
    # Today's notes are the group's: what was said in one topic is remembered in another, not its turns.
    assert "User: User1001: we fly to Oslo on Friday | Assistant: echo: User1001: we fly to Oslo on Friday" in system
    assert said(asked, "user") == ["User1001: what do you know?"]
    assert sorted(p.name for p in (bot.workspace / "memory" / "chats").iterdir()) == [f"telegram:{GROUP}"]


async def test_a_reminder_set_in_a_topic_fires_in_that_topic(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"scheduler": {"reminderCheckSeconds": 1}})
    trips = fake_telegram.open_topic(GROUP, "Trips")
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "pack the bags", "delay": "1s"}, id="c1")]),
        "I'll remind you.",
    )
    assert await ask_in(fake_telegram, trips, "@test_bot remind us to pack in a second") == "I'll remind you."
    sent = await fake_telegram.await_messages(GROUP, 2, timeout=15)
    assert (sent[-1].text, sent[-1].thread_id) == ("⏰ Reminder: pack the bags", trips)

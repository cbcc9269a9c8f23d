"""Forum topics end to end, once per backend (ptb, aiogram): a message asked in a topic of a forum supergroup
is answered in that topic, and each topic is a conversation of its own, while the group's memory stays the
group's. A topic closed or deleted before the bot posts there gets its messages in the General topic."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bot.channels.telegram_channel import TelegramChannel
from bot.domain.session import AgentSession
from tests.channels.telegram_harness import GROUP, RunningBot
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.clock import ManualClock
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.telegram_server import TOPIC_CLOSED, TOPIC_NOT_FOUND, FakeTelegram


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


async def ask_held(fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, topic: int, text: str) -> threading.Event:
    """`text` asked in a topic of `GROUP`, the model's next answer held until the returned event is set."""
    release = threading.Event()
    asked = len(fake_openai.conversation_requests())
    fake_openai.set_responder(lambda body: Reply(text="echo: " + body["messages"][-1]["content"], held_until=release))
    fake_telegram.push_message(GROUP, text, thread_id=topic)
    await fake_telegram.await_until(lambda: len(fake_openai.conversation_requests()) > asked, what="the model asked")
    return release


def refused_sends(fake_telegram: FakeTelegram, topic: int) -> list[str]:
    """The errors of the sends to `topic` that Telegram refused."""
    return [
        call.error or ""
        for call in fake_telegram.calls_to("sendMessage")
        if call.params.get("message_thread_id") == topic and not call.ok
    ]


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


@pytest.mark.parametrize(("gone", "refusal"), [("closed", TOPIC_CLOSED), ("deleted", TOPIC_NOT_FOUND)])
async def test_a_reply_for_a_topic_closed_or_deleted_meanwhile_goes_to_the_general_topic_saying_why(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, gone: str, refusal: str
) -> None:
    trips = fake_telegram.open_topic(GROUP, "Trips")
    release = await ask_held(fake_openai, fake_telegram, trips, "@test_bot where to?")
    if gone == "closed":
        fake_telegram.close_topic(GROUP, trips)
    else:
        fake_telegram.delete_topic(GROUP, trips)
    release.set()
    [reply] = await fake_telegram.await_messages(GROUP)
    assert (reply.thread_id, reply.text) == (
        None,
        f"(This is for the topic “Trips”, which was {gone} before I could post there.)\n\necho: User1001: where to?",
    )
    refused = refused_sends(fake_telegram, trips)
    assert refused and all(refusal in error for error in refused)
    # The topic keeps its conversation: the question and its answer, without the note.
    assert [m.content for m in session(bot, f"{GROUP}:topic:{trips}").messages] == [
        "where to?",
        "echo: User1001: where to?",
    ]
    # The next message in General is answered there, as ever, without a note.
    assert await ask_in(fake_telegram, None, "@test_bot hello") == "echo: User1001: hello"


async def test_a_reminder_for_a_topic_deleted_since_fires_in_the_general_topic(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start({"scheduler": {"reminderCheckSeconds": 1}})
    trips = fake_telegram.open_topic(GROUP, "Trips")
    release = threading.Event()
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "pack the bags", "delay": "2s"}, id="c1")]),
        Reply("I'll remind you.", held_until=release),
    )
    fake_telegram.push_message(GROUP, "@test_bot remind us to pack soon", thread_id=trips)
    await fake_telegram.await_until(lambda: len(fake_openai.conversation_requests()) == 2, what="the reminder set")
    fake_telegram.delete_topic(GROUP, trips, answer="TOPIC_DELETED")
    release.set()
    reply, reminder = await fake_telegram.await_messages(GROUP, 2, timeout=15)
    note = "(This is for the topic “Trips”, which was deleted before I could post there.)\n\n"
    assert (reply.text, reply.thread_id) == (note + "I'll remind you.", None)
    assert (reminder.text, reminder.thread_id) == (note + "⏰ Reminder: pack the bags", None)
    await fake_telegram.await_until(
        lambda: "⏰ Reminder: pack the bags" in [m.content for m in session(bot, f"{GROUP}:topic:{trips}").messages],
        what="the reminder kept in the topic's conversation",
    )


async def test_a_streamed_reply_whose_topic_is_deleted_while_it_is_shown_ends_whole_in_the_general_topic(
    start: BotFactory, fake_telegram: FakeTelegram
) -> None:
    bot = await start({"toolLoop": {"streamEditIntervalSeconds": 1}})
    [channel] = bot.app.channels
    assert isinstance(channel, TelegramChannel)
    channel.clock = clock = ManualClock()
    trips = fake_telegram.open_topic(GROUP, "Trips")
    stream = channel.open_stream(f"{GROUP}:topic:{trips}")
    assert stream is not None
    clock.advance(1)
    await stream.update("We fly")
    assert [(m.text, m.thread_id) for m in fake_telegram.sent_messages(GROUP)] == [("We fly", trips)]
    fake_telegram.delete_topic(GROUP, trips)  # the message shown goes with it
    clock.advance(1)
    # The live update finds its message gone, and the topic: the reply goes on in General.
    await stream.update("We fly to Oslo")
    await stream.finish("We fly to Oslo on Friday.")
    assert fake_telegram.visible_text(GROUP) == [
        "(This is for a topic, which was deleted before I could post there.)\n\nWe fly to Oslo on Friday."
    ]
    assert fake_telegram.thread_ids("sendMessage", GROUP) == [trips, None]


async def test_the_typing_indicator_for_a_deleted_topic_shows_in_the_general_topic_in_one_try(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    [channel] = bot.app.channels
    trips = fake_telegram.open_topic(GROUP, "Trips")
    fake_telegram.delete_topic(GROUP, trips)
    await channel.send_typing(f"{GROUP}:topic:{trips}")
    # Refused once in the topic (no retry), then shown in the General topic, where the reply will go.
    assert [(call.params.get("message_thread_id"), call.ok) for call in fake_telegram.calls_to("sendChatAction")] == [
        (trips, False),
        (None, True),
    ]
    assert fake_telegram.chat_actions(GROUP) == ["typing"]

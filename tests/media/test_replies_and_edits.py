"""Replies and edits: a reply carries the quoted text and its author to the model; an edit of a message
already answered is a correction the model sees; an edit of one still queued replaces its text."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.channels.telegram_harness import OWNER, start_bot
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply
from tests.fakes.telegram_server import FakeTelegram


def message_id_of(fake_telegram: FakeTelegram, update_id: int) -> int:
    return int(fake_telegram.update(update_id)["message"]["message_id"])


def stored_user_messages(workspace_messages: dict[str, object]) -> list[dict[str, object]]:
    messages = workspace_messages["messages"]
    assert isinstance(messages, list)
    return [m for m in messages if m["role"] == "user"]


async def test_a_reply_carries_the_quoted_text_and_its_author(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("Paris has about 2.1 million people.", "The Eiffel Tower, 330 m.")
    fake_telegram.push_message(OWNER, "how many people live in Paris?")
    await fake_telegram.await_messages(OWNER, 1)
    fake_telegram.push_message(OWNER, "and its tallest building?", reply_to_bot=True)
    await fake_telegram.await_messages(OWNER, 2)
    assert fake_openai.user_texts()[-1] == (
        '[Replying to you (the assistant): "Paris has about 2.1 million people."]\nand its tallest building?'
    )
    session = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())
    reply = stored_user_messages(session)[-1]
    assert reply["content"] == "and its tallest building?"
    assert reply["quote"] == {"author": "you (the assistant)", "text": "Paris has about 2.1 million people."}


async def test_a_reply_to_an_earlier_photo_shows_the_model_that_photo_again(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start({"media": {"imagesInPrompt": 2}})
    fake_openai.script("A dog.", "A cat.", "A beagle, I think.", "About two.")
    dog = fake_telegram.push_photo(OWNER, content=b"\xff\xd8\xff\xe0the-dog")
    await fake_telegram.await_messages(OWNER, 1)
    fake_telegram.push_photo(OWNER, content=b"\xff\xd8\xff\xe0the-cat")
    fake_telegram.push_message(OWNER, "I love cats")
    await fake_telegram.await_messages(OWNER, 3)

    def images_sent() -> list[bytes]:
        return [
            base64.b64decode(url.split(",", 1)[1]).removeprefix(b"\xff\xd8\xff\xe0") for url in fake_openai.image_urls()
        ]

    assert images_sent() == [b"the-dog", b"the-cat"]
    # The dog is no longer among the newest images: the question replying to it brings it again.
    for question in ("what breed is it?", "how old?"):
        fake_telegram.push_message(OWNER, question, reply_to_message_id=message_id_of(fake_telegram, dog))
    await fake_telegram.await_messages(OWNER, 5)
    assert images_sent() == [b"the-cat", b"the-dog"]  # each image once, with the newest message that has it
    session = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())
    first_photo, *_, last_question = stored_user_messages(session)
    assert last_question["media"] == first_photo["media"]  # the same file, not a copy


async def test_an_edit_of_an_answered_message_is_a_correction(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("Noted: you arrive on Monday.", "Got it, Tuesday then.")
    first = fake_telegram.push_message(OWNER, "I arrive on Monday")
    await fake_telegram.await_messages(OWNER, 1)
    fake_telegram.push_edited_message(OWNER, message_id_of(fake_telegram, first), "I arrive on Tuesday")
    assert (await fake_telegram.await_messages(OWNER, 2))[-1].text == "Got it, Tuesday then."
    assert fake_openai.user_texts()[-2:] == [
        "I arrive on Monday",
        '[Correction: I edited my earlier message "I arrive on Monday"; it now reads:]\nI arrive on Tuesday',
    ]
    session = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())
    original, correction = stored_user_messages(session)
    assert correction["content"] == "I arrive on Tuesday" and correction["correctionOf"] == original["id"]


async def test_an_edit_of_a_queued_message_replaces_its_text(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.script(Reply(text="First answer.", delay=1.5), "Second answer.")
    fake_telegram.push_message(OWNER, "first question")
    waiting = fake_telegram.push_message(OWNER, "secnd qestion")
    await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0, what="both taken")
    fake_telegram.push_edited_message(OWNER, message_id_of(fake_telegram, waiting), "second question")
    texts = [m.text for m in await fake_telegram.await_messages(OWNER, 2, timeout=15)]
    assert texts == ["First answer.", "Second answer."]
    assert fake_openai.user_texts() == ["first question", "second question"]
    assert len(fake_openai.chat_requests()) == 2  # the edit was not answered on its own


async def test_an_edit_of_a_queued_message_survives_a_restart_before_its_turn(
    workspace_dir: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        fake_openai.script(Fault.hang(30))  # the first answer takes long: the second message waits in the queue
        fake_telegram.push_message(OWNER, "first question")
        waiting = fake_telegram.push_message(OWNER, "secnd qestion")
        await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0, what="both taken")
        await fake_telegram.await_until(lambda: len(fake_openai.chat_requests()) == 1, what="the first one asked")
        fake_telegram.push_edited_message(OWNER, message_id_of(fake_telegram, waiting), "second question")
        await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0, what="the edit taken")
        # The bot goes down before the queued message's turn: its runs are cut short, nothing more is answered.
        await bot.app.router.dispatcher.close(0)
    finally:
        await bot.stop()
    assert fake_telegram.sent_messages(OWNER) == []
    fake_openai.script("First answer.", "Second answer.")
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        texts = [m.text for m in await fake_telegram.await_messages(OWNER, 2, timeout=15)]
    finally:
        await bot.stop()
    assert texts == ["First answer.", "Second answer."]
    assert fake_openai.user_texts() == ["first question", "second question"]
    session = json.loads((workspace_dir / "sessions" / f"telegram:{OWNER}.json").read_text())
    assert [m["content"] for m in stored_user_messages(session)] == ["first question", "second question"]

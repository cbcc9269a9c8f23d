"""`/retry`, `/undo`, `/model` and `/export` through Telegram (both backends), and the command menu."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from tests.channels.telegram_harness import GROUP, OWNER, start_bot
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


async def ask(fake_telegram: FakeTelegram, chat: int, text: str, **options: object) -> str:
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, text, **options)  # type: ignore[arg-type]
    return (await fake_telegram.await_messages(chat, before + 1, timeout=15))[-1].text


def session_messages(workspace: Path, chat: int = OWNER) -> list[dict[str, object]]:
    stored = json.loads((workspace / "sessions" / f"telegram:{chat}.json").read_text())
    messages = stored["messages"]
    assert isinstance(messages, list)
    return messages


async def test_the_menu_lists_the_new_commands(start: BotFactory, fake_telegram: FakeTelegram) -> None:
    await start()
    menu = [c["command"] for c in fake_telegram.commands()]
    assert {"retry", "undo", "model", "export"} <= set(menu)


async def test_retry_answers_the_last_message_again(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("A dull answer.", "A better answer.")
    assert await ask(fake_telegram, OWNER, "tell me a joke") == "A dull answer."
    assert await ask(fake_telegram, OWNER, "/retry") == "A better answer."
    assert fake_openai.user_texts() == ["tell me a joke"]  # asked again, not stored twice
    assert [(m["role"], m["content"]) for m in session_messages(bot.workspace)] == [
        ("user", "tell me a joke"),
        ("assistant", "A better answer."),
    ]


async def test_retry_and_undo_with_nothing_to_act_on(start: BotFactory, fake_telegram: FakeTelegram) -> None:
    await start()
    assert await ask(fake_telegram, OWNER, "/retry") == "There is no message of yours to answer again."
    assert await ask(fake_telegram, OWNER, "/undo") == "There is nothing to undo."
    assert await ask(fake_telegram, OWNER, "/export") == "The conversation is empty; there is nothing to export."


async def test_undo_drops_the_last_exchange(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("Noted.", "Noted too.", "You said: keep.")
    await ask(fake_telegram, OWNER, "keep this")
    await ask(fake_telegram, OWNER, "forget this")
    reply = await ask(fake_telegram, OWNER, "/undo")
    assert reply.startswith('Removed your last message ("forget this") and my answer (2 messages)')
    assert [m["content"] for m in session_messages(bot.workspace)] == ["keep this", "Noted."]
    await ask(fake_telegram, OWNER, "what did I say?")
    assert fake_openai.user_texts() == ["keep this", "what did I say?"]
    archive = (bot.workspace / "sessions" / "archive" / f"telegram:{OWNER}.jsonl").read_text()
    assert "forget this" in archive  # the archive keeps everything


async def test_the_owner_switches_the_model_live_and_it_holds_after_a_restart(
    workspace_dir: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, backend: str
) -> None:
    config = {"llm": {"models": ["fast-model"]}}
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    try:
        listing = await ask(fake_telegram, OWNER, "/model")
        assert listing == "Model: gpt-4o-mini. Configured: gpt-4o-mini, fast-model. Switch with /model NAME."
        assert "not a configured model" in await ask(fake_telegram, OWNER, "/model gpt-nonexistent")
        refused = await ask(fake_telegram, GROUP, "/model fast-model")  # a member, not the owner
        assert refused == "Only the owner can switch the model."
        switched = await ask(fake_telegram, OWNER, "/model fast-model")
        assert switched == "Switched to fast-model; your next message uses it."
        await ask(fake_telegram, OWNER, "hello")
        assert fake_openai.last_chat_request()["model"] == "fast-model"
        assert "fast-model" in await ask(fake_telegram, OWNER, "/status")
    finally:
        await bot.stop()
    assert json.loads((workspace_dir / "state" / "model.json").read_text()) == {"model": "fast-model"}
    again = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    try:
        await ask(fake_telegram, OWNER, "still there?")
        assert fake_openai.last_chat_request()["model"] == "fast-model"
        switched = await ask(fake_telegram, OWNER, "/model gpt-4o-mini")
        assert switched == "Switched to gpt-4o-mini; your next message uses it."
        await ask(fake_telegram, OWNER, "and now?")
        assert fake_openai.last_chat_request()["model"] == "gpt-4o-mini"
    finally:
        await again.stop()


async def test_export_sends_the_conversation_as_a_markdown_file(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.script("Lisbon is lovely in May.")
    await ask(fake_telegram, OWNER, "where should I travel in May?")
    fake_telegram.push_message(OWNER, "/export")
    await fake_telegram.await_until(lambda: bool(fake_telegram.sent_documents(OWNER)), timeout=15, what="a file")
    [document] = fake_telegram.sent_documents(OWNER)
    assert document.filename is not None and document.filename.startswith("conversation-")
    assert document.filename.endswith(".md")
    text = document.data.decode()
    assert text.startswith(f"# Conversation telegram:{OWNER}\n")
    assert "where should I travel in May?" in text and "## Assistant (" in text and "Lisbon is lovely in May." in text
    [call] = fake_telegram.calls_to("sendDocument")
    assert call.params["caption"] == "The conversation so far (2 messages)."


FIRST_ANSWER = "Lyon is lovely: walk the traboules of the old town on a quiet morning."
SECOND_ANSWER = "Then try a bouchon near Saint-Jean for dinner; the quenelles are the local classic."


def memory_lines(workspace: Path) -> tuple[list[str], list[dict[str, object]], list[dict[str, object]]]:
    """The daily-note lines, the memory items and the knowledge-graph queue entries in the workspace."""
    memory = workspace / "memory"
    notes = [
        line
        for note in sorted(memory.glob("????-??-??.md"))
        for line in note.read_text(errors="replace").splitlines()
        if line
    ]
    items = [
        json.loads(line)
        for path in sorted((memory / "items").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    queue = workspace / "rag" / "documents.jsonl"
    documents = [json.loads(line) for line in queue.read_text().splitlines()] if queue.exists() else []
    return notes, items, documents


async def memory_written(fake_telegram: FakeTelegram, workspace: Path, answer: str) -> None:
    """Wait for the writes after the reply: the note line and the knowledge-graph document of `answer`."""

    def written() -> bool:
        notes, _, documents = memory_lines(workspace)
        return any(answer in line for line in notes) and any(answer in str(doc.get("text")) for doc in documents)

    await fake_telegram.await_until(written, what="the exchange written to memory")


async def test_retry_takes_the_dropped_answer_out_of_memory(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script(FIRST_ANSWER, SECOND_ANSWER)
    assert await ask(fake_telegram, OWNER, "I live in Lyon now. What should I see first?") == FIRST_ANSWER
    await memory_written(fake_telegram, bot.workspace, FIRST_ANSWER)
    notes, items, documents = memory_lines(bot.workspace)
    assert len(notes) == 1 and FIRST_ANSWER in notes[0]  # written, as every exchange is
    assert any(FIRST_ANSWER in str(item["content"]) for item in items)
    assert any(FIRST_ANSWER in str(doc.get("text", "")) for doc in documents)
    first_answer_id = str(session_messages(bot.workspace)[-1]["id"])

    assert await ask(fake_telegram, OWNER, "/retry") == SECOND_ANSWER
    await memory_written(fake_telegram, bot.workspace, SECOND_ANSWER)
    notes, items, documents = memory_lines(bot.workspace)
    assert len(notes) == 1 and notes[0].endswith(
        f"User: I live in Lyon now. What should I see first? | Assistant: {SECOND_ANSWER}"
    )
    assert not any(FIRST_ANSWER in json.dumps(item) or first_answer_id in json.dumps(item) for item in items)
    [turn] = [item for item in items if item["type"] == "turn"]
    assert SECOND_ANSWER in str(turn["content"])
    # The fact said in the message is there once, from the exchange that stays.
    facts = [item for item in items if "Lyon" in str(item["content"]) and item["type"] != "turn"]
    assert facts and all(first_answer_id not in cast(list[str], item["references"]) for item in facts)
    assert not any(FIRST_ANSWER in json.dumps(doc) for doc in documents)
    assert [doc["status"] for doc in documents if SECOND_ANSWER in str(doc.get("text", ""))] == ["queued"]
    archive = (bot.workspace / "sessions" / "archive" / f"telegram:{OWNER}.jsonl").read_text()
    assert FIRST_ANSWER in archive  # the archive is never rewritten


async def test_undo_takes_the_exchange_out_of_memory_and_keeps_hand_edits(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("Noted: the spare key is under the blue pot.", FIRST_ANSWER)
    await ask(fake_telegram, OWNER, "The spare key is under the blue pot by the door")
    await memory_written(fake_telegram, bot.workspace, "the blue pot.")
    [note] = sorted((bot.workspace / "memory").glob("????-??-??.md"))
    hand_written = b"my own remark, typed by hand\n\xff\xfe not even UTF-8\n"
    with note.open("ab") as file:  # the person's own line, and one the bot cannot read, stay as written
        file.write(hand_written)
    before = note.read_bytes()
    await ask(fake_telegram, OWNER, "I live in Lyon now. What should I see first?")
    await memory_written(fake_telegram, bot.workspace, FIRST_ANSWER)
    reply = await ask(fake_telegram, OWNER, "/undo")
    assert reply.startswith('Removed your last message ("I live in Lyon now. What should I see first?")')
    assert note.read_bytes() == before  # the Lyon line, written after these, is gone; nothing else changed
    assert before.endswith(hand_written)
    _, items, documents = memory_lines(bot.workspace)
    assert not any("Lyon" in json.dumps(item) for item in items)
    assert any("blue pot" in str(item["content"]) for item in items)
    assert not any(FIRST_ANSWER in json.dumps(doc) for doc in documents)

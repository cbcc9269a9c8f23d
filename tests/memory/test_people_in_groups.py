"""People in groups: the model learns who speaks, memory records who said what, and with
`memory.scope: user` each person's memory stays theirs across the chats they share with the bot.
Through Telegram (the real clients against the fake Bot API) and the fake model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.pipeline.systems.context_building import GROUP_CHAT_LINE
from tests.channels.telegram_harness import GROUP, OWNER, RunningBot, start_bot
from tests.fakes.bot_fixtures import BACKENDS
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

ANN, BOB = 1001, 1002


@pytest.fixture(params=BACKENDS)
async def bot(
    request: pytest.FixtureRequest, workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> AsyncIterator[RunningBot]:
    config = {
        "access": {"allowedUsers": [OWNER, ANN, BOB]},
        "memory": {"scope": "user", "embeddingsModel": None},
        "rag": {"enabled": False},
    }
    running = await start_bot(workspace_dir, fake_openai, fake_telegram, str(request.param), config)
    yield running
    await running.stop()


async def say(fake_telegram: FakeTelegram, chat: int, text: str, user: int, name: str) -> str:
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, text, user_id=user, first_name=name)
    return (await fake_telegram.await_messages(chat, before + 1, timeout=15))[-1].text


def text_under(folder: Path) -> str:
    """The text of the memory files under `folder` (not the indexes derived from them, under index/)."""
    files = [path for path in sorted(folder.rglob("*")) if path.is_file() and "index" not in path.parts]
    return "\n".join(path.read_text() for path in files)


async def test_group_memory_is_kept_apart_per_person(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await say(fake_telegram, GROUP, "@test_bot I live in Lyon. My favourite colour is blue.", ANN, "Ann")
    await say(fake_telegram, GROUP, "@test_bot I live in Porto", BOB, "Bob")
    # The model is told who speaks, and that "I" means the sender.
    assert fake_openai.user_texts()[-2:] == [
        "Ann: I live in Lyon. My favourite colour is blue.",
        "Bob: I live in Porto",
    ]
    assert GROUP_CHAT_LINE in (fake_openai.system_prompts()[-1] or "")
    await bot.app.router.dispatcher.drain()

    memory = bot.workspace / "memory"
    group_notes = text_under(memory / "chats" / f"telegram:{GROUP}")
    assert "User: Ann: I live in Lyon. My favourite colour is blue. | Assistant:" in group_notes
    assert "User: Bob: I live in Porto | Assistant:" in group_notes  # the group's own memory names each speaker
    items = [
        json.loads(line)
        for path in (memory / "chats" / f"telegram:{GROUP}" / "items").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    facts = {item["content"]: item for item in items if item["type"] != "turn"}
    # Each fact is its speaker's, under a key of theirs: Bob's city does not replace Ann's.
    assert {"Ann: I live in Lyon.", "Ann: My favourite colour is blue.", "Bob: I live in Porto"} <= set(facts)
    assert not any("supersededBy" in fact for fact in facts.values())
    ann, bob = text_under(memory / "users" / f"telegram:{ANN}"), text_under(memory / "users" / f"telegram:{BOB}")
    assert "I live in Lyon" in ann and "Porto" not in ann
    assert "I live in Porto" in bob and "Lyon" not in bob
    assert not list(memory.glob("20*.md")) and not list((memory / "items").rglob("*.jsonl"))  # none global

    # In her private chat Ann's memory is hers: Lyon, never Bob's Porto.
    await say(fake_telegram, ANN, "where do I live?", ANN, "Ann")
    prompt = "\n".join(m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "system")
    assert "Lyon" in prompt and "Porto" not in prompt
    assert "You are talking with Ann (user id 1001)." in prompt

    # /memory in the group shows each person their own items.
    bobs = await say(fake_telegram, GROUP, "/memory", BOB, "Bob")
    assert "Porto" in bobs and "Lyon" not in bobs


async def test_undo_in_a_group_takes_the_exchange_out_of_the_groups_and_the_persons_memory(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    await say(fake_telegram, GROUP, "@test_bot My favourite colour is blue.", ANN, "Ann")
    await say(fake_telegram, GROUP, "@test_bot I live in Lyon. Any tips?", ANN, "Ann")
    await bot.app.router.dispatcher.drain()
    memory = bot.workspace / "memory"
    group, ann = memory / "chats" / f"telegram:{GROUP}", memory / "users" / f"telegram:{ANN}"
    assert "Lyon" in text_under(group) and "Lyon" in text_under(ann)

    assert (await say(fake_telegram, GROUP, "/undo", ANN, "Ann")).startswith("Removed your last message")
    await bot.app.router.dispatcher.drain()
    assert "Lyon" not in text_under(group) and "Lyon" not in text_under(ann)
    assert "Ann: My favourite colour is blue." in text_under(group)  # the exchange before stays
    assert "My favourite colour is blue." in text_under(ann)


async def test_in_a_group_retry_and_undo_act_only_on_the_senders_own_last_exchange(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await say(fake_telegram, GROUP, "@test_bot I live in Lyon.", ANN, "Ann")
    await bot.app.router.dispatcher.drain()
    assert await say(fake_telegram, GROUP, "/undo", BOB, "Bob") == (
        "The last message here is Ann's; /undo drops only your own last exchange."
    )
    assert await say(fake_telegram, GROUP, "/retry", BOB, "Bob") == (
        "The last message here is Ann's; /retry answers again only your own last message."
    )
    assert len(fake_openai.chat_requests()) == 1  # nothing answered again
    group = bot.workspace / "memory" / "chats" / f"telegram:{GROUP}"
    assert "Ann: I live in Lyon." in text_under(group)  # and nothing of Ann's taken out of memory
    session = json.loads((bot.workspace / "sessions" / f"telegram:{GROUP}.json").read_text())
    assert [m["content"] for m in session["messages"] if m["role"] == "user"] == ["I live in Lyon."]


def facts_in(folder: Path) -> dict[str, dict[str, object]]:
    """The facts (every item but the turns) of the memory under `folder`, by content."""
    items = [json.loads(line) for path in (folder / "items").rglob("*.jsonl") for line in path.read_text().splitlines()]
    return {item["content"]: item for item in items if item["type"] != "turn"}


async def test_a_forwarded_message_is_remembered_as_its_authors(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    await say(fake_telegram, OWNER, "My name is Sam.\nI live in Paris.", OWNER, "Sam")
    fake_telegram.push_forwarded_message(OWNER, "My name is Zoe.\nI live in Lyon.", author="Zoe")
    await fake_telegram.await_messages(OWNER, 2)
    fake_telegram.push_forwarded_message(GROUP, "@test_bot I live in Porto.", author="Bob", user_id=ANN)
    await fake_telegram.await_messages(GROUP, 1)
    await bot.app.router.dispatcher.drain()
    memory = bot.workspace / "memory"
    owners = facts_in(memory / "users" / f"telegram:{OWNER}")
    # Zoe's name and city are hers: the owner's stay current, none replaced.
    assert {"My name is Sam.", "I live in Paris.", "Zoe: My name is Zoe.", "Zoe: I live in Lyon."} <= set(owners)
    assert not any("supersededBy" in fact for fact in owners.values())
    assert "Bob: I live in Porto." in facts_in(memory / "chats" / f"telegram:{GROUP}")
    assert "I live in Porto." not in facts_in(memory / "users" / f"telegram:{ANN}")  # Ann only passed it on

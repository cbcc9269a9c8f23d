"""When stored items get their vectors: the message's own vector on the reply path, the items' while
the bot is idle, never ahead of a waiting reply; an item without its vector yet is found by its words,
and one left without a vector by a stop gets it after the next start.

The embedder is the fake endpoint's `/v1/embeddings` (`memory.embeddingsModel: "fake-embedding"`), so
what is embedded, and in which order beside the chat requests, is what the fake received.
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.memory.indexing import VectorIndexing
from bot.memory.scopes import MemoryScopes
from bot.workspace import Workspace
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Fault
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, say, write_items

FACT = "the garage door code is 9876."
SEEDED = "We planted three apple trees behind the barn in March."


def embedded_texts(fake_openai: FakeOpenAI, first: int = 0, last: int | None = None) -> list[str]:
    """Every text sent to `/v1/embeddings` among the fake's requests `first` to `last` (a message's text holds
    the fact it states: the item's own text is compared whole)."""
    texts: list[str] = []
    for request in fake_openai.requests[first:last]:
        if request.path == "/v1/embeddings" and isinstance(request.json, dict):
            sent = request.json["input"]
            texts += sent if isinstance(sent, list) else [sent]
    return texts


async def wait_until_embedded(fake_openai: FakeOpenAI, text: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while text not in embedded_texts(fake_openai):
            await asyncio.sleep(0.05)


def seed(services: Application) -> None:
    day = datetime.now(UTC) - timedelta(days=30)
    write_items(
        services.workspace.memory.episodic_file(day.date()),
        [item(MemoryLayer.EPISODIC, SEEDED, day, type_="dialog_turn")],
    )


async def test_a_stored_items_vector_waits_for_the_reply_another_chat_is_waiting_for(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, embeddingsModel="fake-embedding")
    await say(services, channel, "1", "hello")  # memory loaded, its vectors made
    await services.router.accept(channel.message("1", f"Remember that {FACT}"), channel)
    await channel.wait_for("1", 2)
    # Chat 2's message arrives right after chat 1's reply, and its answer takes a while.
    fake_openai.fail_next(1, Fault.hang(2.0))
    await services.router.accept(channel.message("2", "what should I plant in the garden?"), channel)
    await channel.wait_for("2", 1)
    answered = len(fake_openai.requests)

    before_the_reply = embedded_texts(fake_openai, last=answered)
    assert "what should I plant in the garden?" in before_the_reply  # the query's vector: on the reply path
    assert FACT not in before_the_reply  # the stored item's: not ahead of the reply
    await wait_until_embedded(fake_openai, FACT)  # made once the bot is idle, with nothing asked of it


async def test_in_a_burst_a_reply_is_not_kept_waiting_behind_another_messages_vector(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.memory")
    configure_memory(services, embeddingsModel="fake-embedding")
    chats = ("1", "2", "3")
    for chat in chats:
        await say(services, channel, chat, "hello")  # each chat's memory loaded, its vectors made
    fake_openai.embedding_delay = 1.0  # the embedder is slow: one vector keeps it busy for a second
    first = len(fake_openai.requests)
    questions = {chat: f"what did we plant in field number {chat}?" for chat in chats}
    for chat, question in questions.items():
        await services.router.accept(channel.message(chat, question), channel)
    for chat in chats:
        await channel.wait_for(chat, 2)

    # One message's vector was made; the other replies were built from their words meanwhile, and say so.
    embedded = embedded_texts(fake_openai, first)
    assert len([question for question in questions.values() if question in embedded]) == 1, embedded
    packs = [
        record.getMessage() for record in caplog.records if record.getMessage().startswith("[Context] Memory pack")
    ]
    assert sum("(lexical, embedder busy" in pack for pack in packs[-3:]) == 2, packs


async def test_an_item_without_its_vector_yet_is_found_by_its_words(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, embeddingsModel="fake-embedding")
    seed(services)
    services.memory.follow_replies(lambda: True)  # a reply always waiting: no stored item is embedded
    await services.router.accept(channel.message("1", "when did we plant the apple trees?"), channel)
    await channel.wait_for("1", 1)

    assert SEEDED in (memory_section(fake_openai.system_prompts()[-1]) or "")
    assert SEEDED not in embedded_texts(fake_openai)
    await services.router.accept(channel.message("1", "/status"), channel)
    [_, status] = await channel.wait_for("1", 2)
    assert re.search(r"vectors 0/\d+", status), status


async def test_items_left_without_a_vector_by_a_stop_get_it_after_the_next_start(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    first = Application(env_for(workspace_dir, fake_openai))
    try:
        configure_memory(first, embeddingsModel="fake-embedding")
        seed(first)
        first.memory.follow_replies(lambda: True)
        await first.router.accept(channel.message("1", "hello there"), channel)
        await channel.wait_for("1", 1)
    finally:
        await first.stop()
    assert SEEDED not in embedded_texts(fake_openai)

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        await again.start()
        await wait_until_embedded(fake_openai, SEEDED)  # asked for by nothing but the start
        await again.memory.settle()  # its answer stored
        status = await say(again, channel, "1", "/status")
        assert re.search(r"vectors (\d+)/\1 \(fake-embedding\)", status), status
    finally:
        await again.stop()


async def test_the_embedder_makes_one_messages_vector_at_a_time_while_replies_wait(tmp_path: Path) -> None:
    scopes = MemoryScopes(Workspace(tmp_path), UTC, None)
    try:
        indexing = VectorIndexing(scopes)
        waiting = 3
        indexing.follow_replies(lambda: waiting)
        assert indexing.take_query_turn()  # the first of the burst gets its vector
        assert not indexing.take_query_turn()  # the next ones would queue behind it: built from their words
        indexing.query_done()
        assert indexing.take_query_turn()  # the embedder is free again: the next message gets it
        waiting = 1
        assert indexing.take_query_turn()  # one reply at a time always waits for its own vector
    finally:
        await scopes.close()

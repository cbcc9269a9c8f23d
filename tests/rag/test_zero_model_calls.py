"""Reading the knowledge graph asks no model: local keywords, the bundled embedder, one chat call a turn.

Through the real Telegram clients (both backends) against the fake Bot API, and the real `openai`
client against a fake endpoint that has no `/embeddings` at all and is given no key, as a local
server or a router without embeddings would be.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.rag.keywords import content_words
from bot.rag.service import RELEVANT_MEMORY_HEADER
from tests.channels.telegram_harness import OWNER, RunningBot, start_bot
from tests.fakes.bot_fixtures import BACKENDS
from tests.fakes.openai_server import FakeOpenAI, message_text
from tests.fakes.telegram_server import FakeTelegram
from tests.rag.helpers import lightrag_responder, rag_of
from tests.waiting import wait_until

FACT = "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now."
QUESTION = "Where does Marta work these days?"


async def start(workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str,
                rag: dict[str, float]) -> RunningBot:  # fmt: skip
    # Every other setting as shipped: hybrid mode, the bundled embedder; no OPENAI_API_KEY at all.
    return await start_bot(workspace, fake_openai, fake_telegram, backend, {"rag": rag}, openai_api_key=None)


def forget_every_other_layer(workspace: Path) -> None:
    """Nothing of the fact left outside the graph: items, their indexes and the daily notes go."""
    memory = workspace / "memory"
    for path in memory.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        elif path.name != "MEMORY.md":
            path.unlink()
    assert "Gulbenkian" not in (memory / "MEMORY.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fact_only_in_the_graph_comes_back_with_one_chat_call_and_no_embeddings_call(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    workspace = tmp_path / "workspace"
    fake_openai.serves_embeddings = False
    fake_openai.set_responder(lightrag_responder)
    bot = await start(workspace, fake_openai, fake_telegram, backend, {"idleFlushSeconds": 0.2})
    try:
        fake_telegram.push_message(OWNER, FACT)
        await fake_telegram.await_messages(OWNER, 1)
        rag = rag_of(bot.app)

        async def indexed() -> bool:  # by the scheduler, once the chat was quiet (extraction asks the model)
            return (await rag.store.counts())["indexed"] == 1

        await wait_until(indexed, timeout=20)
        fake_telegram.push_message(OWNER, "/new")
        await fake_telegram.await_messages(OWNER, 2)
    finally:
        await bot.stop()
    assert json.loads((workspace / "rag" / "embedder.json").read_text()) == {"model": "local", "dimensions": 384}
    forget_every_other_layer(workspace)

    # A new session after a restart; nothing is indexed while the question is answered.
    bot = await start(workspace, fake_openai, fake_telegram, backend, {"idleFlushSeconds": 3600,
                                                                       "flushIntervalSeconds": 3600})  # fmt: skip
    try:
        requests_before = len(fake_openai.requests)
        fake_telegram.push_message(OWNER, QUESTION)
        await fake_telegram.await_messages(OWNER, 3)
        during = [request.path for request in fake_openai.requests[requests_before:]]
    finally:
        await bot.stop()
    assert during == ["/v1/chat/completions"]  # the answer, and nothing else: no keywords, no embeddings
    answer = fake_openai.last_chat_request()
    assert answer["messages"][-1]["content"] == QUESTION
    system = "\n".join(message_text(m["content"]) for m in answer["messages"] if m["role"] == "system")
    assert RELEVANT_MEMORY_HEADER in system
    relevant = system.split(RELEVANT_MEMORY_HEADER, 1)[1]
    assert "Marta" in relevant and "Gulbenkian" in relevant
    assert "Gulbenkian" not in system.split(RELEVANT_MEMORY_HEADER, 1)[0]  # from the graph, not another layer


def test_a_greeting_is_not_looked_up_and_a_question_is() -> None:
    assert content_words("hi! how are you?") == []
    assert content_words("Where does my sister Marta work these days?") == ["sister", "Marta", "work", "days"]

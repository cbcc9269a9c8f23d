"""The request body `LlmClient` posts: the kept per-message JSON gives what encoding the messages gives."""

from __future__ import annotations

from bot.domain.message import Message
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.wire import WireForms
from tests.fakes.openai_server import FakeOpenAI

TOOLS = [{"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}]


async def test_a_request_with_its_messages_json_posts_the_same_body_as_one_without(fake_openai: FakeOpenAI) -> None:
    conversation = [
        Message.user("Grüße aus Köln 🌧"),
        Message.assistant("Hallo!"),
        Message.user('and a quote: "rain", a backslash \\ and a tab\t'),
    ]
    wire = WireForms().messages("persona", conversation, turn_prompt="# Memory")
    client = LlmClient("sk-test", fake_openai.base_url)
    try:
        for messages_json in (wire.jsons, None):
            request = ChatRequest(model="fake-model", messages=wire.messages, messages_json=messages_json, tools=TOOLS)
            await client.complete(request)
    finally:
        await client.close()
    kept, encoded = (recorded.json for recorded in fake_openai.requests)
    assert kept == encoded
    assert kept["messages"] == wire.messages and kept["tools"] == TOOLS and kept["model"] == "fake-model"
    assert kept["messages"][1]["content"] == "Grüße aus Köln 🌧"

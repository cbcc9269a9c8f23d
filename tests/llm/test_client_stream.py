"""`LlmClient.stream` over the fake's SSE chunks: text as it comes, tool calls put together from their
fragments, the provider's usage, and an error event in the middle of a stream."""

from __future__ import annotations

import pytest

from bot.llm.client import ChatRequest, ChatResult, LlmClient, TextDelta
from bot.llm.errors import LlmError
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, ToolCallSpec, Usage

REQUEST = ChatRequest(model="fake-model", messages=[{"role": "user", "content": "hello"}])


async def streamed(fake: FakeOpenAI) -> tuple[list[str], ChatResult]:
    client = LlmClient("sk-test", fake.base_url)
    pieces: list[str] = []
    try:
        async for item in client.stream(REQUEST):
            if isinstance(item, TextDelta):
                pieces.append(item.text)
            else:
                return pieces, item
    finally:
        await client.close()
    raise AssertionError("the stream ended without a result")


async def test_text_tool_calls_and_usage_come_through(fake_openai: FakeOpenAI) -> None:
    calls = [ToolCallSpec("clock", {"zone": "Europe/Berlin"}, id="call_1"), ToolCallSpec("weather", id="call_2")]
    fake_openai.script(Reply("Let me look that up.", calls, usage=Usage(1200, 30, cached_tokens=1024)))
    pieces, result = await streamed(fake_openai)
    assert len(pieces) > 1 and "".join(pieces) == result.text == "Let me look that up."
    assert [(call.id, call.name, call.arguments) for call in result.tool_calls] == [
        ("call_1", "clock", '{"zone": "Europe/Berlin"}'),
        ("call_2", "weather", "{}"),
    ]
    assert result.finish_reason == "tool_calls"
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cached_tokens) == (1200, 30, 1024)


async def test_an_error_event_in_the_middle_of_a_stream_is_a_model_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.error_event("The upstream provider went away", after_chunks=2))
    with pytest.raises(LlmError) as raised:
        await streamed(fake_openai)
    assert "upstream provider went away" in raised.value.detail

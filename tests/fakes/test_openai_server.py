"""Tests of the fake OpenAI server, driven by the real ``openai`` clients (nothing is mocked)."""

import asyncio
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam

from tests.fakes.clock import until
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, ToolCallSpec, TranscriptSegment, Usage, fake_embedding

USER_HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def sync_client(fake: FakeOpenAI, **kwargs: Any) -> OpenAI:
    kwargs.setdefault("max_retries", 0)
    return OpenAI(base_url=fake.base_url, api_key="sk-test", **kwargs)


def async_client(fake: FakeOpenAI, **kwargs: Any) -> AsyncOpenAI:
    kwargs.setdefault("max_retries", 0)
    return AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", **kwargs)


# -- replies --------------------------------------------------------------------------------------


def test_default_responder_echoes_last_user_message_with_estimated_usage(fake_openai: FakeOpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second question"},
    ]
    with sync_client(fake_openai) as client:
        result = client.chat.completions.create(model="gpt-test", messages=messages)

    assert result.choices[0].message.content == "echo: second question"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == "gpt-test"
    total_chars = len("You are terse.") + len("first") + len("ok") + len("second question")
    assert result.usage is not None
    assert result.usage.prompt_tokens == total_chars // 4
    assert result.usage.completion_tokens == len("echo: second question") // 4
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_scripted_replies_are_consumed_in_order_then_default(fake_openai: FakeOpenAI) -> None:
    fake_openai.script("first", Reply(text="second", usage=Usage(prompt_tokens=11, completion_tokens=7)))
    with sync_client(fake_openai) as client:
        texts = []
        usages = []
        for _ in range(3):
            result = client.chat.completions.create(model="m", messages=USER_HI)
            texts.append(result.choices[0].message.content)
            usages.append(result.usage)

    assert texts == ["first", "second", "echo: hi"]
    assert usages[1] is not None
    assert (usages[1].prompt_tokens, usages[1].completion_tokens, usages[1].total_tokens) == (11, 7, 18)
    assert fake_openai.queued == 0


def test_set_responder_replaces_the_default(fake_openai: FakeOpenAI) -> None:
    fake_openai.set_responder(lambda request: f"{len(request['messages'])} messages")
    with sync_client(fake_openai) as client:
        result = client.chat.completions.create(model="m", messages=USER_HI * 3)
    assert result.choices[0].message.content == "3 messages"


async def test_streaming_with_include_usage_yields_text_then_a_usage_chunk(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(text="Hello there, streaming world!", usage=Usage(5, 6)))
    async with async_client(fake_openai) as client:
        stream = await client.chat.completions.create(
            model="m", messages=USER_HI, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]

    content_chunks = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1
    assert "".join(content_chunks) == "Hello there, streaming world!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (5, 6, 11)
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_include_usage_has_no_usage_chunk(fake_openai: FakeOpenAI) -> None:
    with sync_client(fake_openai) as client:
        chunks = list(client.chat.completions.create(model="m", messages=USER_HI, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: hi"


def test_tool_calls_non_streamed(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        Reply(
            tool_calls=[
                ToolCallSpec("get_weather", {"city": "Paris", "days": 2}),
                ToolCallSpec("remember", '{"fact": "likes tea"}', id="call_fixed"),
            ]
        )
    )
    with sync_client(fake_openai) as client:
        result = client.chat.completions.create(model="m", messages=USER_HI)

    choice = result.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = [c for c in choice.message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)]
    assert [c.function.name for c in calls] == ["get_weather", "remember"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "days": 2}
    assert calls[0].id.startswith("call_")
    assert calls[1].id == "call_fixed"


async def test_tool_calls_streamed_reassemble(fake_openai: FakeOpenAI) -> None:
    arguments = {"query": "a fairly long search query that spans several fragments", "limit": 5}
    fake_openai.script(Reply(text="Let me look.", tool_calls=[ToolCallSpec("search", arguments, id="call_1")]))
    calls: dict[int, dict[str, str]] = {}
    finish_reasons = []
    async with async_client(fake_openai) as client:
        stream = await client.chat.completions.create(model="m", messages=USER_HI, stream=True)
        text = ""
        argument_chunks = 0
        async for chunk in stream:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            if chunk.choices[0].finish_reason:
                finish_reasons.append(chunk.choices[0].finish_reason)
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += tc.id or ""
                if tc.function is not None:
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
                    argument_chunks += bool(tc.function.arguments)

    assert text == "Let me look."
    assert finish_reasons == ["tool_calls"]
    assert calls == {0: {"id": "call_1", "name": "search", "arguments": json.dumps(arguments)}}
    assert argument_chunks > 1


# -- embeddings and models ------------------------------------------------------------------------


def test_embeddings_are_deterministic_unit_vectors(fake_openai: FakeOpenAI) -> None:
    with sync_client(fake_openai) as client:
        batch = client.embeddings.create(model="emb", input=["alpha beta", "gamma", "alpha beta"], dimensions=16)
        single = client.embeddings.create(model="emb", input="gamma", encoding_format="float")

    vectors = [d.embedding for d in batch.data]
    assert [d.index for d in batch.data] == [0, 1, 2]
    assert all(len(v) == 16 for v in vectors)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-5) for v in vectors)
    assert vectors[0] == vectors[2]
    assert vectors[0] != vectors[1]
    # the default encoding_format (base64 float32, which the client decodes) matches the float one
    assert len(single.data[0].embedding) == 64
    assert single.data[0].embedding == pytest.approx(fake_embedding("gamma", 64))
    assert vectors[1] == pytest.approx(fake_embedding("gamma", 16), rel=1e-6)


def test_embeddings_of_texts_sharing_words_are_closer(fake_openai: FakeOpenAI) -> None:
    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    base = fake_embedding("the cat sat on the mat")
    assert cosine(base, fake_embedding("a cat on a mat")) > cosine(base, fake_embedding("quantum tax law"))


def test_models_endpoint(fake_openai: FakeOpenAI) -> None:
    with sync_client(fake_openai) as client:
        assert [m.id for m in client.models.list()] == ["fake-model"]


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503])
def test_status_fault_raises_internal_server_error(fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.script(Fault.status(status, "upstream exploded"))
    with sync_client(fake_openai) as client, pytest.raises(openai.InternalServerError) as excinfo:
        client.chat.completions.create(model="m", messages=USER_HI)
    assert excinfo.value.status_code == status
    assert excinfo.value.body == {
        "message": "upstream exploded",
        "type": "server_error",
        "param": None,
        "code": None,
    }


async def test_rate_limit_fault_raises_rate_limit_error_with_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.rate_limit(retry_after=7))
    async with async_client(fake_openai) as client:
        with pytest.raises(openai.RateLimitError) as excinfo:
            await client.chat.completions.create(model="m", messages=USER_HI)
    assert excinfo.value.code == "rate_limit_exceeded"
    assert excinfo.value.response.headers["retry-after"] == "7"


def test_client_honours_retry_after_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.rate_limit(retry_after=0.05))
    with sync_client(fake_openai, max_retries=1) as client:
        result = client.chat.completions.create(model="m", messages=USER_HI)
    assert result.choices[0].message.content == "echo: hi"
    assert len(fake_openai.chat_requests()) == 2


async def test_hang_fault_trips_the_client_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.hang(30))
    started = time.monotonic()
    async with async_client(fake_openai, timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=USER_HI)
        assert time.monotonic() - started < 5
        # the hanging request does not block the next one
        result = await client.chat.completions.create(model="m", messages=USER_HI)
    assert result.choices[0].message.content == "echo: hi"


def test_stop_ends_a_pending_hang_promptly() -> None:
    fake = FakeOpenAI().start()
    fake.script(Fault.hang(60))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            with sync_client(fake) as client:
                client.chat.completions.create(model="m", messages=USER_HI)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 5
    while not fake.chat_requests() and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    fake.stop()
    thread.join(timeout=5)
    assert time.monotonic() - started < 3
    assert len(errors) == 1
    assert isinstance(errors[0], openai.APIConnectionError)


def test_context_length_fault_raises_bad_request(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.context_length_exceeded())
    with sync_client(fake_openai, max_retries=2) as client, pytest.raises(openai.BadRequestError) as excinfo:
        client.chat.completions.create(model="m", messages=USER_HI)
    assert excinfo.value.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in excinfo.value.message
    assert len(fake_openai.chat_requests()) == 1  # 400s are not retried


def test_disconnect_fault_raises_connection_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.disconnect())
    with sync_client(fake_openai) as client, pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER_HI)


def test_disconnect_mid_stream_raises_connection_error_while_iterating(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Fault.disconnect(after_chunks=2))
    received = []
    with sync_client(fake_openai) as client:
        stream = client.chat.completions.create(model="m", messages=USER_HI, stream=True)
        with pytest.raises(openai.APIConnectionError):
            for chunk in stream:
                received.append(chunk)
    assert len(received) == 2


def test_malformed_json_surfaces_as_a_json_decode_error(fake_openai: FakeOpenAI) -> None:
    # openai 3.54 does not wrap this in an OpenAIError: callers see json.JSONDecodeError.
    fake_openai.fail_next(2, Fault.malformed_json())
    with sync_client(fake_openai) as client:
        with pytest.raises(json.JSONDecodeError):
            client.chat.completions.create(model="m", messages=USER_HI)
        with pytest.raises(json.JSONDecodeError):
            list(client.chat.completions.create(model="m", messages=USER_HI, stream=True))


def test_client_retries_after_one_500_and_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(1, Fault.status(500))
    with sync_client(fake_openai, max_retries=2) as client:
        result = client.chat.completions.create(model="m", messages=USER_HI)
    assert result.choices[0].message.content == "echo: hi"
    assert len(fake_openai.requests) == 2
    assert [r.headers["x-stainless-retry-count"] for r in fake_openai.requests] == ["0", "1"]


def test_required_api_key_is_enforced() -> None:
    with FakeOpenAI(required_api_key="sk-right") as fake:
        with OpenAI(base_url=fake.base_url, api_key="sk-wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError) as excinfo:
                client.chat.completions.create(model="m", messages=USER_HI)
        assert excinfo.value.code == "invalid_api_key"
        with OpenAI(base_url=fake.base_url, api_key="sk-right", max_retries=0) as client:
            result = client.chat.completions.create(model="m", messages=USER_HI)
        assert result.choices[0].message.content == "echo: hi"


# -- concurrency and recording --------------------------------------------------------------------


async def test_concurrent_held_requests_overlap(fake_openai: FakeOpenAI) -> None:
    release = threading.Event()
    fake_openai.set_responder(lambda request: Reply(text=request["messages"][0]["content"], held_until=release))
    async with async_client(fake_openai) as client:
        answers = asyncio.gather(
            *(
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(i)}])
                for i in range(100)
            )
        )
        # All of them arrive while none is answered: a held reply does not hold up the others.
        await until(lambda: len(fake_openai.chat_requests()) == 100)
        release.set()
        results = await answers
    assert [r.choices[0].message.content for r in results] == [str(i) for i in range(100)]


def test_requests_are_recorded_in_order_with_helpers(fake_openai: FakeOpenAI) -> None:
    with sync_client(fake_openai) as client:
        for i in range(3):
            client.chat.completions.create(
                model="m",
                messages=[{"role": "system", "content": f"system {i}"}, {"role": "user", "content": f"u{i}"}],
            )
        client.embeddings.create(model="emb", input="x")
        client.chat.completions.create(model="m", messages=USER_HI)

    assert [(r.method, r.path) for r in fake_openai.requests] == [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/chat/completions"),
    ]
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-test"
    assert [body["messages"][-1]["content"] for body in fake_openai.chat_requests()] == [
        "u0",
        "u1",
        "u2",
        "hi",
    ]
    assert fake_openai.system_prompts() == ["system 0", "system 1", "system 2", None]
    assert fake_openai.last_chat_request()["messages"] == USER_HI

    fake_openai.script("left over")
    fake_openai.reset()
    assert fake_openai.requests == []
    assert fake_openai.queued == 0
    with pytest.raises(LookupError):
        fake_openai.last_chat_request()


def test_runs_standalone_as_a_module() -> None:
    command = [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0"]
    repo_root = Path(__file__).resolve().parents[2]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=repo_root) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("PORT=")
            base_url = f"http://127.0.0.1:{int(line.removeprefix('PORT='))}/v1"
            with OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
                result = client.chat.completions.create(model="m", messages=USER_HI)
            assert result.choices[0].message.content == "echo: hi"
        finally:
            proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_transcriptions_serve_verbose_json_with_the_configured_segments(fake_openai: FakeOpenAI) -> None:
    fake_openai.transcript = "hello there"
    fake_openai.transcript_duration = 4.0
    fake_openai.transcript_segments = [
        TranscriptSegment(0.0, 1.5, avg_logprob=-0.2, no_speech_prob=0.01, text="hello"),
        TranscriptSegment(1.5, 4.0, avg_logprob=-1.4, no_speech_prob=0.7, text=" there"),
    ]
    client = sync_client(fake_openai)
    verbose = client.audio.transcriptions.create(
        model="whisper-1", file=("voice.ogg", b"OggS voice", "audio/ogg"), response_format="verbose_json"
    )
    assert (verbose.text, verbose.duration) == ("hello there", 4.0)
    assert [(s.start, s.end, s.avg_logprob, s.no_speech_prob) for s in verbose.segments or []] == [
        (0.0, 1.5, -0.2, 0.01),
        (1.5, 4.0, -1.4, 0.7),
    ]
    plain = client.audio.transcriptions.create(model="whisper-1", file=("voice.ogg", b"OggS voice", "audio/ogg"))
    assert plain.text == "hello there"
    assert [r["responseFormat"] for r in fake_openai.transcription_requests()] == ["verbose_json", ""]


def test_transcriptions_refuse_verbose_json_like_a_model_without_it(fake_openai: FakeOpenAI) -> None:
    fake_openai.verbose_json_supported = False
    client = sync_client(fake_openai, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.transcriptions.create(
            model="gpt-4o-transcribe", file=("voice.ogg", b"OggS voice", "audio/ogg"), response_format="verbose_json"
        )
    assert "response_format 'verbose_json' is not compatible with model 'gpt-4o-transcribe'" in str(refused.value)
    plain = client.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=("voice.ogg", b"OggS voice", "audio/ogg")
    )
    assert plain.text == fake_openai.transcript


# -- a model's real window ------------------------------------------------------------------------


def _long_conversation() -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": "You are terse."}]
    for number in range(10):
        messages.append({"role": "user", "content": f"question {number} " + "q" * 400})
        messages.append({"role": "assistant", "content": f"answer {number} " + "a" * 400})
    messages.append({"role": "user", "content": "the newest question"})
    return messages


def test_a_window_that_refuses_answers_a_longer_prompt_with_openais_refusal(fake_openai: FakeOpenAI) -> None:
    fake_openai.window_tokens = 1000
    with pytest.raises(openai.BadRequestError) as refused:
        sync_client(fake_openai).chat.completions.create(model="fake-model", messages=_long_conversation())
    assert refused.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in str(refused.value)
    assert fake_openai.refusals == 1
    short = sync_client(fake_openai).chat.completions.create(model="fake-model", messages=USER_HI)
    assert short.choices[0].message.content == "echo: hi" and fake_openai.refusals == 1


def test_a_window_that_cuts_drops_the_oldest_messages_and_reports_the_smaller_usage(fake_openai: FakeOpenAI) -> None:
    fake_openai.window_tokens = 1000
    fake_openai.window_behaviour = "cut"
    received: list[list[str]] = []

    def responder(request: dict[str, Any]) -> str:
        received.append([message["content"] for message in request["messages"]])
        return "ok"

    fake_openai.set_responder(responder)
    answer = sync_client(fake_openai).chat.completions.create(model="fake-model", messages=_long_conversation())
    assert answer.usage is not None and answer.usage.prompt_tokens <= 1000
    (kept,) = received
    assert kept[0] == "You are terse." and kept[-1] == "the newest question"  # the oldest in between are gone
    assert not any(text.startswith("question 0 ") for text in kept) and fake_openai.cuts == 1
    assert len(fake_openai.chat_requests()[-1]["messages"]) == 22  # what was sent is recorded whole

"""Payload-too-large recovery: compact harder and retry, at most twice, only while it shrinks."""

from __future__ import annotations

import pytest

from bot.app import Application
from bot.compaction.recovery import is_payload_too_large, with_payload_recovery
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.llm.client import ChatRequest, ChatResult
from bot.llm.errors import LlmError, LlmFailure
from bot.llm.wire import to_openai_messages
from tests.compaction.helpers import SMALL_MODEL, compaction_of, is_summary_request, provider_tokens
from tests.fakes.openai_server import FakeOpenAI, Fault


async def conversation(services: Application, turns: int = 16) -> AgentSession:
    session = await services.sessions.get_or_create("test", "1")
    messages: list[Message] = []
    for number in range(turns):
        messages += [
            Message.user(f"question {number} " + "q" * 150),
            Message.assistant(f"answer {number} " + "a" * 150),
        ]
    await services.sessions.append_messages(session, [*messages, Message.user("the newest question")])
    return session


def chat_call(services: Application, session: AgentSession) -> ChatRequest:
    return ChatRequest(model=SMALL_MODEL, messages=to_openai_messages("You are helpful.", session.messages))


async def test_a_context_length_refusal_is_retried_after_compacting_and_succeeds(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    session = await conversation(small_services)
    fake_openai.script(Fault.context_length_exceeded(4000, 4100))

    async def call() -> ChatResult:
        return await small_services.llm.complete(chat_call(small_services, session))

    result = await with_payload_recovery(compaction_of(small_services), session, SMALL_MODEL, 2, call)

    assert result.text.startswith("Noted: the newest q")
    chats = [r for r in fake_openai.chat_requests() if not is_summary_request(r)]
    assert len(chats) == 2 and provider_tokens(chats[1]) < provider_tokens(chats[0])
    assert chats[1]["messages"][1]["content"].startswith("[Conversation summary]")
    assert chats[1]["messages"][-1]["content"] == "the newest question"
    assert session.metadata.compaction_events[-1]["reason"] == "recovery"


async def test_an_http_413_counts_as_too_large(small_services: Application, fake_openai: FakeOpenAI) -> None:
    session = await conversation(small_services)
    fake_openai.script(Fault.status(413, "Request Entity Too Large"))

    async def call() -> ChatResult:
        return await small_services.llm.complete(chat_call(small_services, session))

    result = await with_payload_recovery(compaction_of(small_services), session, SMALL_MODEL, 2, call)
    assert result.text.startswith("Noted: the newest")


async def test_recovery_gives_up_after_two_attempts_and_keeps_the_users_message(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    session = await conversation(small_services, turns=40)
    calls: list[int] = []

    async def call() -> ChatResult:
        calls.append(len(session.messages))
        fake_openai.script(Fault.context_length_exceeded())
        return await small_services.llm.complete(chat_call(small_services, session))

    with pytest.raises(LlmError) as refused:
        await with_payload_recovery(compaction_of(small_services), session, SMALL_MODEL, 2, call)

    assert refused.value.failure is LlmFailure.CONTEXT_LENGTH
    assert "too long for the model" in refused.value.user_message
    assert len(calls) == 3  # the first try and two retries
    assert calls[0] > calls[1] >= calls[2]
    assert session.messages[-1].content == "the newest question"


async def test_when_nothing_can_be_compacted_there_is_no_pointless_retry(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    session = await small_services.sessions.get_or_create("test", "1")
    await small_services.sessions.append_messages(session, [Message.user("one enormous message " + "x" * 20000)])
    calls = 0

    async def call() -> ChatResult:
        nonlocal calls
        calls += 1
        fake_openai.script(Fault.context_length_exceeded())
        return await small_services.llm.complete(chat_call(small_services, session))

    with pytest.raises(LlmError):
        await with_payload_recovery(compaction_of(small_services), session, SMALL_MODEL, 2, call)
    assert calls == 1
    assert session.messages[0].content.startswith("one enormous message")


def test_other_failures_are_not_payload_problems() -> None:
    assert is_payload_too_large(LlmError(LlmFailure.CONTEXT_LENGTH, "x"))
    assert is_payload_too_large(LlmError(LlmFailure.BAD_REQUEST, "Error code: 413 - too large"))
    assert not is_payload_too_large(LlmError(LlmFailure.BAD_REQUEST, "Error code: 400 - bad"))
    assert not is_payload_too_large(LlmError(LlmFailure.TIMEOUT, "Error code: 413"))


async def test_the_tool_loop_recovers_a_refused_payload_and_the_user_gets_an_answer(
    small_services: Application, fake_openai: FakeOpenAI
) -> None:
    from tests.fakes.recording_channel import RecordingChannel

    await conversation(small_services, turns=6)  # fits: no compaction before the call
    fake_openai.script(Fault.context_length_exceeded(4000, 4100))
    channel = RecordingChannel()
    await small_services.router.accept(channel.message("1", "and one more question"), channel)
    (reply,) = await channel.wait_for("1", 1)
    assert "too long" not in reply
    chats = [r for r in fake_openai.chat_requests() if not is_summary_request(r)]
    assert len(chats) == 2 and provider_tokens(chats[1]) < provider_tokens(chats[0])
    assert chats[1]["messages"][1]["content"].startswith("[Conversation summary]")
    assert chats[1]["messages"][-1]["content"] == "and one more question"

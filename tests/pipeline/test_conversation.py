"""A conversation through the whole pipeline, asserting what the fake model receives and what the user gets."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path

import pytest

from bot.app import Application
from bot.commands.registry import CommandRegistry
from bot.context.plan import ContextPlan
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.ledger.store import LedgerFile
from bot.ledger.turns import Turn, TurnLedger
from bot.pipeline.router import InboundRouter
from bot.pipeline.runner import PipelineRunner
from bot.pipeline.system import PipelineSystem
from bot.pipeline.systems.auto_compaction import AutoCompactionSystem
from bot.pipeline.turn import TurnContext
from bot.settings import RuntimeConfig
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, Usage
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import WAIT_SECONDS


async def reopened(app: Application) -> list[Turn]:
    """The turns a start of `app` finds left open by the last run, as its first stage reads them."""
    return await app.ledger.reopen(app.sessions.get, {"test"})


async def say(services: Application, channel: RecordingChannel, chat_id: str, text: str) -> str:
    before = len(channel.sent[chat_id])
    await services.router.accept(channel.message(chat_id, text), channel)
    return (await channel.wait_for(chat_id, before + 1))[-1]


async def test_the_model_gets_the_system_prompt_and_the_whole_conversation(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("Hello Ann!", "You are Ann.")
    assert await say(services, channel, "1", "my name is Ann") == "Hello Ann!"
    assert await say(services, channel, "1", "who am I?") == "You are Ann."

    request = fake_openai.last_chat_request()
    assert request["model"] == "gpt-4o-mini"
    system, *conversation, this_message, newest = request["messages"]
    assert system["role"] == "system"
    assert "personal assistant" in system["content"]
    assert conversation == [
        {"role": "user", "content": "my name is Ann"},
        {"role": "assistant", "content": "Hello Ann!"},
    ]
    # What changes every message comes after the history, so the start of the request is the last one's.
    assert this_message["role"] == "system"
    assert "Current date and time:" in this_message["content"] and "(UTC)" in this_message["content"]
    assert newest == {"role": "user", "content": "who am I?"}
    first_request = fake_openai.chat_requests()[0]["messages"]
    assert request["messages"][:2] == [first_request[0], first_request[2]]


async def test_a_turn_that_compacts_nothing_plans_its_context_once(
    services: Application, channel: RecordingChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    compaction = next(system for system in services.runner.systems if isinstance(system, AutoCompactionSystem))
    planner = compaction.compaction.planner  # the one planner of the bot: context building's too
    plans: list[ContextPlan] = []
    plan = planner.plan

    def counted(session: AgentSession, model: str, config: RuntimeConfig) -> ContextPlan:
        plans.append(plan(session, model, config))
        return plans[-1]

    monkeypatch.setattr(planner, "plan", counted)
    await say(services, channel, "1", "hello")
    await services.router.dispatcher.drain()
    assert len(plans) == 1  # AutoCompaction's (18), which ContextBuilding (20) starts from


async def test_the_tokens_the_provider_served_from_its_prompt_cache_are_logged_and_shown_in_status(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # The fake caches like a provider: the leading messages the previous request had too.
    await say(services, channel, "1", "my name is Ann and I keep bees on the roof of my building in Lisbon")
    caplog.set_level("INFO", logger="bot")
    await say(services, channel, "1", "how many hives would fit on a flat roof of forty square metres?")
    await services.router.dispatcher.drain()
    status = await say(services, channel, "1", "/status")
    found = re.search(r"last call (\d+) prompt tokens \((\d+) cached\)", status)
    assert found is not None, status
    prompt, cached = int(found[1]), int(found[2])
    assert 0 < cached < prompt  # the persona and the first exchange came from the cache
    assert any(re.search(rf"prompt tokens, {cached} cached", r.getMessage()) for r in caplog.records)


async def test_a_hand_edited_persona_is_used_on_the_next_message(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "hi")
    services.workspace.system_prompt_file.write_text("You are Captain Memo, a pirate.")
    await say(services, channel, "1", "hi again")
    prompt = fake_openai.system_prompts()[-1]
    assert prompt is not None and prompt.startswith("You are Captain Memo, a pirate.")


async def test_bot_model_from_the_environment_overrides_the_runtime_config(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = Application(env_for(workspace_dir, fake_openai, bot_model="env-model"))
    try:
        services.workspace.runtime_config_file.write_text(json.dumps({"llm": {"model": "file-model"}}))
        assert await say(services, channel, "1", "hi") == "echo: hi"
        assert fake_openai.last_chat_request()["model"] == "env-model"
        assert "Model: env-model" in await say(services, channel, "1", "/status")
    finally:
        await services.stop()


async def test_usage_reported_by_the_provider_is_recorded(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Reply(text="ok", usage=Usage(prompt_tokens=1234, completion_tokens=5, cached_tokens=1024)))
    await say(services, channel, "1", "hi")
    session = await services.sessions.get("test:1")
    assert session is not None
    assert session.metadata.last_usage == {
        "promptTokens": 1234,
        "completionTokens": 5,
        "cachedTokens": 1024,
        "model": "gpt-4o-mini",
    }


async def test_a_model_error_keeps_the_users_message_and_says_so(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    fake_openai.fail_next(3, Fault.status(503, "overloaded"))  # the first try and both retries
    reply = await say(services, channel, "1", "please remember the milk")
    assert "model service had an error" in reply and "Your message is saved" in reply

    stored = json.loads((workspace_dir / "sessions" / "test:1.json").read_text())
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [("user", "please remember the milk")]
    archived = (workspace_dir / "sessions" / "archive" / "test:1.jsonl").read_text()
    assert "please remember the milk" in archived

    # The next message carries the unanswered one along, so nothing the user said is lost.
    await say(services, channel, "1", "are you back?")
    users = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]
    assert users == ["please remember the milk", "are you back?"]


async def test_a_transient_server_error_is_retried_transparently(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Fault.status(500), "second try worked")
    assert await say(services, channel, "1", "hi") == "second try worked"
    assert len(fake_openai.chat_requests()) == 2


@pytest.mark.parametrize("fault", [Fault.status(502), Fault.status(503), Fault.rate_limit()], ids=str)
async def test_bad_gateway_unavailable_and_a_bare_rate_limit_are_retried(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fault: Fault
) -> None:
    fake_openai.script(fault, "second try worked")
    assert await say(services, channel, "1", "hi") == "second try worked"
    assert len(fake_openai.chat_requests()) == 2


@pytest.mark.parametrize(
    ("fault", "explained"),
    [(Fault.status(503), "The model service had an error."), (Fault.rate_limit(), "The model is rate-limited")],
    ids=["503", "429"],
)
async def test_a_model_that_keeps_failing_gets_a_clear_reply_and_the_message_is_kept(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fault: Fault, explained: str
) -> None:
    services.workspace.runtime_config_file.write_text(json.dumps({"llm": {"maxRetries": 1}}))
    fake_openai.script(fault, fault)
    assert explained in await say(services, channel, "1", "please remember this")
    session = await services.sessions.get("test:1")
    assert session is not None and session.messages[0].content == "please remember this"


async def test_rate_limit_with_retry_after_is_honoured(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Fault.rate_limit(retry_after=0.3), "after the wait")
    started = time.monotonic()
    assert await say(services, channel, "1", "hi") == "after the wait"
    assert time.monotonic() - started >= 0.3


async def test_context_length_exceeded_is_explained(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Fault.context_length_exceeded())
    reply = await say(services, channel, "1", "long story")
    assert "too long for the model" in reply
    assert len(fake_openai.chat_requests()) == 1  # a 400 is not retried


async def test_a_model_that_hangs_times_out_with_a_clear_reply(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services.workspace.runtime_config_file.write_text(
        json.dumps({"llm": {"requestTimeoutSeconds": 0.3, "maxRetries": 0}})
    )
    fake_openai.script(Fault.hang(5))
    reply = await say(services, channel, "1", "are you there?")
    assert "did not answer in time" in reply


async def test_malformed_model_response_is_explained(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Fault.malformed_json())
    assert "could not read" in await say(services, channel, "1", "hi")


async def test_an_undeliverable_reply_stays_in_the_session(services: Application, fake_openai: FakeOpenAI) -> None:
    flaky = RecordingChannel(fail_sends=1)
    fake_openai.script("lost in transit")
    await services.router.accept(flaky.message("1", "hello"), flaky)
    await services.router.dispatcher.drain()
    session = await services.sessions.get("test:1")
    assert session is not None
    assert [m.content for m in session.messages] == ["hello", "lost in transit"]


async def test_messages_of_one_chat_are_answered_in_order_and_chats_run_concurrently(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # What is measured is the dispatching: memory and RAG have their own benchmarks (bench/).
    services.workspace.runtime_config_file.write_text(
        json.dumps({"memory": {"enabled": False}, "rag": {"enabled": False}})
    )
    chats, per_chat = 20, 3
    release = threading.Event()
    fake_openai.set_responder(lambda body: Reply(text="ok " + body["messages"][-1]["content"], held_until=release))
    for number in range(per_chat):
        for chat in range(chats):
            await services.router.accept(channel.message(str(chat), f"{chat}-{number}"), channel)
    try:
        # Every chat's first message reaches the model while none is answered: the chats run side by side,
        # and no chat's second message goes out before its first is answered.
        async with asyncio.timeout(WAIT_SECONDS):
            while len(fake_openai.chat_requests()) < chats:
                await asyncio.sleep(0.01)
        asked = sorted(request["messages"][-1]["content"] for request in fake_openai.chat_requests())
        assert asked == sorted(f"{chat}-0" for chat in range(chats))
    finally:
        release.set()
    await asyncio.wait_for(services.router.dispatcher.drain(), WAIT_SECONDS)

    for chat in range(chats):
        assert channel.sent[str(chat)] == [f"ok {chat}-{n}" for n in range(per_chat)]


async def test_status_and_new_commands(services: Application, channel: RecordingChannel) -> None:
    await say(services, channel, "1", "hello")
    status = await say(services, channel, "1", "/status")
    assert "Messages: 2" in status
    assert "Model: gpt-4o-mini" in status and "Compactions: 0" in status
    assert "MEMORY.md" in status and "today's notes" in status

    assert "2 messages cleared" in await say(services, channel, "1", "/new")
    assert "Messages: 0" in await say(services, channel, "1", "/status")
    help_text = await say(services, channel, "1", "/help")
    assert "/new" in help_text and "/status" in help_text
    assert "Unknown command /frobnicate" in await say(services, channel, "1", "/frobnicate now")


async def test_a_path_is_not_a_command(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    assert await say(services, channel, "1", "/usr/bin is where it lives") == "echo: /usr/bin is where it lives"


async def test_a_disk_failure_still_gets_an_answer_that_says_memory_was_not_saved(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    await say(services, channel, "1", "first")
    # The session file's name is taken by a folder: every rewrite now fails the way a full disk does.
    live = workspace_dir / "sessions" / "test:1.json"
    live.unlink()
    live.mkdir()
    reply = await say(services, channel, "1", "second")
    assert reply.startswith("echo: second\n\n(I could not save this conversation to disk:")

    live.rmdir()  # the disk recovers: the next save writes everything kept in memory
    await say(services, channel, "1", "third")
    stored = json.loads(live.read_text())
    assert [m["content"] for m in stored["messages"]] == [
        "first",
        "echo: first",
        "second",
        "echo: second",
        "third",
        "echo: third",
    ]


async def test_a_message_the_ledger_cannot_record_is_still_answered(
    services: Application, channel: RecordingChannel, workspace_dir: Path
) -> None:
    ledger = workspace_dir / "state" / "turns.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.unlink(missing_ok=True)
    ledger.mkdir()  # every append now fails the way a full disk does
    assert await say(services, channel, "1", "hello") == "echo: hello"


async def test_an_archive_failure_loses_nothing_once_the_disk_recovers(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    archive = workspace_dir / "sessions" / "archive" / "test:1.jsonl"
    archive.mkdir(parents=True)
    assert "could not save this conversation" in await say(services, channel, "1", "kept in memory")
    archive.rmdir()
    await say(services, channel, "1", "disk is back")
    lines = [json.loads(line)["content"] for line in archive.read_text().splitlines()]
    assert lines == ["kept in memory", "echo: kept in memory", "disk is back", "echo: disk is back"]


async def test_a_damaged_session_file_is_reported_to_the_user(
    services: Application, channel: RecordingChannel, workspace_dir: Path
) -> None:
    (workspace_dir / "sessions" / "test:1.json").write_text("{ torn")
    await services.router.accept(channel.message("1", "hello"), channel)
    notice, answer = await channel.wait_for("1", 2)
    assert "conversation file was damaged" in notice and "test:1.json.corrupt-" in notice
    assert answer == "echo: hello"


async def test_a_message_left_unanswered_by_a_crash_is_answered_once_after_the_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    await say(services, channel, "1", "answered before the crash")
    # Received, and its question stored (a shutdown wrote it, cut short), when the bot died.
    cut_short = await services.ledger.receive(channel.message("1", "sent just before the crash"))
    session = await services.sessions.get_or_create("test", "1")
    await services.sessions.append_messages(session, [Message.user(cut_short.inbound.text, cut_short.id)])
    # Received, and ended by a failure the user was told of: delivered, not to be answered again.
    failed = await services.ledger.receive(channel.message("2", "a model error"))
    other = await services.sessions.get_or_create("test", "2")
    await services.sessions.append_messages(other, [Message.user(failed.inbound.text, failed.id)])
    await failed.answered("The model service had an error.")
    await failed.delivered()

    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    assert [t.inbound.text for t in backlog] == ["sent just before the crash"]
    restarted.router.resume(backlog, [fresh])
    assert await fresh.wait_for("1", 1) == ["echo: sent just before the crash"]
    await restarted.router.dispatcher.drain()
    assert fresh.sent["2"] == []
    users = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]
    assert users == ["answered before the crash", "sent just before the crash"]  # stored once, not twice
    assert await reopened(restarted) == []  # answered: nothing left to resume
    await restarted.stop()


async def test_a_stopped_run_is_not_resumed_after_a_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    fake_openai.script(Reply(text="too slow", delay=5))
    await services.router.accept(channel.message("1", "long question"), channel)
    while not services.router.dispatcher.queue_depths():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    await services.router.accept(channel.message("1", "/stop"), channel)
    assert await channel.wait_for("1", 1) == ["Stopped."]
    await services.router.dispatcher.drain()
    restarted = Application(env_for(workspace_dir, fake_openai))
    assert await reopened(restarted) == []
    await restarted.stop()


async def test_a_message_waiting_behind_a_run_when_the_bot_dies_is_answered_after_the_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    fake_openai.script(Reply(text="never delivered", delay=30))
    await services.router.accept(channel.message("1", "first, slow"), channel)
    await services.router.accept(channel.message("1", "second, waiting"), channel)
    while not fake_openai.chat_requests():  # the first run is waiting for the model
        await asyncio.sleep(0.01)
    await services.router.dispatcher.close(0)  # the process dies: runs cut short, nothing settled

    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    # Neither was written to the session (a turn writes its question with its answer): both come back
    # from the ledger, in order, as messages not yet begun.
    assert [(t.inbound.text, t.begun_before) for t in backlog] == [("first, slow", False), ("second, waiting", False)]
    restarted.router.resume(backlog, [fresh])
    assert await fresh.wait_for("1", 2) == ["echo: first, slow", "echo: second, waiting"]
    await restarted.router.dispatcher.drain()
    session = await restarted.sessions.get("test:1")
    assert session is not None
    assert [m.content for m in session.messages if m.role.value == "user"] == ["first, slow", "second, waiting"]
    assert restarted.ledger.open_turns() == []  # everything delivered: nothing to replay next time
    await restarted.stop()


async def test_an_answer_stored_when_the_bot_died_before_sending_it_is_sent_after_the_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    # The state a SIGKILL leaves between storing the answer and sending it: received, stored (the ledger
    # records no "answered" for an answer the session holds).
    recorded = await services.ledger.receive(channel.message("1", "what is on today?"))
    session = await services.sessions.get_or_create("test", "1")
    await services.sessions.append_messages(
        session, [Message.user("what is on today?", recorded.id), Message.assistant("Dentist at 3.")]
    )

    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    assert [(t.inbound.text, t.begun_before) for t in backlog] == [("what is on today?", True)]
    restarted.router.resume(backlog, [fresh])
    assert await fresh.wait_for("1", 1) == ["Dentist at 3."]
    await restarted.router.dispatcher.drain()
    assert fresh.sent["1"] == ["Dentist at 3."]
    assert fake_openai.chat_requests() == []  # the stored answer is sent as it is, the model is not asked again
    again = await restarted.sessions.get("test:1")
    assert again is not None and [m.content for m in again.messages] == ["what is on today?", "Dentist at 3."]
    assert await reopened(restarted) == []  # delivered: recorded as done
    await restarted.stop()


async def test_a_retry_cut_short_by_a_crash_is_answered_once_after_the_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    assert await say(services, channel, "1", "hi") == "echo: hi"
    fake_openai.script(Reply(text="never delivered", delay=30))
    await services.router.accept(channel.message("1", "/retry"), channel)
    while len(fake_openai.chat_requests()) < 2:  # the new answer is being written
        await asyncio.sleep(0.01)
    await services.router.dispatcher.close(0)  # the process dies

    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    # The /retry itself and the turn it reopened: the first answers the message again, the second is then
    # found delivered and not answered a second time.
    assert [(t.inbound.text, t.begun_before) for t in backlog] == [("/retry", False), ("hi", True)]
    restarted.router.resume(backlog, [fresh])
    await fresh.wait_for("1", 1)
    await restarted.router.dispatcher.drain()
    assert fresh.sent["1"] == ["echo: hi"]
    assert restarted.ledger.open_turns() == []
    await restarted.stop()


async def test_a_reply_recorded_answered_when_the_bot_died_before_sending_it_is_sent_as_recorded(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    # The state a SIGKILL leaves between recording the reply answered and sending it (or between Telegram
    # taking it and the ledger hearing so): the ledger holds the reply, and it is sent as it was recorded.
    recorded = await services.ledger.receive(channel.message("1", "look at this photo"))
    session = await services.sessions.get_or_create("test", "1")
    await services.sessions.append_messages(
        session, [Message.user(recorded.inbound.text, recorded.id), Message.assistant("A cat.")]
    )
    await recorded.answered("(I could not see the image.)\n\nA cat.")

    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    assert [(t.inbound.text, t.begun_before) for t in backlog] == [("look at this photo", True)]
    restarted.router.resume(backlog, [fresh])
    await restarted.router.dispatcher.drain()
    assert fresh.sent["1"] == ["(I could not see the image.)\n\nA cat."]
    assert fake_openai.chat_requests() == []
    assert await reopened(restarted) == []  # delivered: recorded
    await restarted.stop()


async def test_the_ledger_records_a_reply_delivered_as_soon_as_it_went_out_before_memory_is_written(
    services: Application, channel: RecordingChannel, tmp_path: Path
) -> None:
    memory_written = asyncio.Event()

    class Answer(PipelineSystem):
        order, name = 30, "Answer"

        async def process(self, ctx: TurnContext) -> None:
            ctx.reply_text = "noted"

    class SlowMemory(PipelineSystem):
        order, name, after_reply = 50, "SlowMemory", True

        async def process(self, ctx: TurnContext) -> None:
            await memory_written.wait()

    journal = tmp_path / "turns.jsonl"
    runner = PipelineRunner([Answer(), SlowMemory()], services.sessions, services.config_store)
    router = InboundRouter(runner, CommandRegistry(), None, TurnLedger(LedgerFile(journal)))
    await router.accept(channel.message("1", "remember the milk"), channel)
    assert await channel.wait_for("1", 1) == ["noted"]

    def done_lines() -> list[str]:
        return [line for line in journal.read_text().splitlines() if line.startswith('{"delivered"')]

    deadline = time.monotonic() + 5
    while not done_lines() and time.monotonic() < deadline:  # memory is still being written meanwhile
        await asyncio.sleep(0.01)
    assert len(done_lines()) == 1 and not memory_written.is_set()
    memory_written.set()
    await router.dispatcher.drain()
    assert len(done_lines()) == 1  # recorded once, not again when the turn ends


async def test_a_plain_turn_writes_its_question_with_its_answer_in_one_save(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    session_file = workspace_dir / "sessions" / "test:1.json"
    await say(services, channel, "1", "first")
    seen_while_answering: list[list[str]] = []

    def answer(request: dict[str, object]) -> Reply:
        # The model is asked while the question lives in the turn ledger, not yet in the session file.
        stored = json.loads(session_file.read_text())
        seen_while_answering.append([m["content"] for m in stored["messages"]])
        return Reply(text="second answer")

    fake_openai.set_responder(answer)
    inode_before = session_file.stat().st_ino
    assert await say(services, channel, "1", "second") == "second answer"
    assert seen_while_answering == [["first", "echo: first"]]
    stored = json.loads(session_file.read_text())
    assert [m["content"] for m in stored["messages"]] == ["first", "echo: first", "second", "second answer"]
    assert session_file.stat().st_ino != inode_before  # rewritten (atomically: a new file renamed over it)
    archive = workspace_dir / "sessions" / "archive" / "test:1.jsonl"
    archived = [json.loads(line)["content"] for line in archive.read_text().splitlines()]
    assert archived == ["first", "echo: first", "second", "second answer"]


def string_bag_record(text: str, turn_id: str, message_id: str, extra: dict[str, str]) -> dict[str, object]:
    """A *received* record as the release before typed messages wrote it: the parts as strings in `extra`."""
    fields = {"channel_type": "test", "chat_id": "1", "user_id": "1", "text": text, "message_id": message_id,
              "username": None, "sender_name": None, "is_group": False, "dedup_key": None}  # fmt: skip
    return {"received": {**fields, "extra": extra, "resumed": False, "journal_id": turn_id}}


async def test_a_ledger_written_before_typed_messages_is_resumed_and_answered_once(
    fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    # A workspace the previous release stopped in: one reply recorded and not sent, one reply to a quoted
    # message never begun. The first is sent as recorded; the second reaches the model with its quote.
    ledger = workspace_dir / "state" / "turns.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    records = [
        string_bag_record("hello", "t-answered", "10", {}),
        {"answered": "t-answered", "reply": "Hi there!"},
        string_bag_record("and tomorrow?", "t-quoted", "11", {"quoteAuthor": "Bob", "quoteText": "rain today"}),
    ]
    ledger.write_text("".join(json.dumps(record) + "\n" for record in records))
    restarted = Application(env_for(workspace_dir, fake_openai))
    fresh = RecordingChannel()
    backlog = await reopened(restarted)
    assert [(t.id, t.begun_before) for t in backlog] == [("t-answered", True), ("t-quoted", False)]
    restarted.router.resume(backlog, [fresh])
    assert await fresh.wait_for("1", 2) == ["Hi there!", 'echo: [Replying to Bob: "rain today"]\nand tomorrow?']
    [request] = fake_openai.chat_requests()
    assert request["messages"][-1] == {"role": "user", "content": '[Replying to Bob: "rain today"]\nand tomorrow?'}
    await restarted.router.dispatcher.drain()
    assert await reopened(restarted) == []  # both delivered
    session = await restarted.sessions.get("test:1")
    assert session is not None and [m.id for m in session.messages if m.role.value == "user"] == ["t-quoted"]
    await restarted.stop()

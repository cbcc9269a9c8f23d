"""`InboundRouter` on its own: what each inbound message becomes (a run, a command's answer, a notice, a
refusal), with the pipeline replaced by a runner that records what reaches it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from bot.access.pairing import PairingStore
from bot.access.policy import NOT_ALLOWED_REPLY, AccessPolicy
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import Attachment, InboundMessage
from bot.ledger.store import LedgerFile
from bot.ledger.turns import TurnLedger
from bot.pipeline.outbound import TurnOutbound
from bot.pipeline.router import InboundRouter
from bot.pipeline.runner import PipelineRunner
from bot.pipeline.turn import TurnContext
from bot.runtime_config import RuntimeConfigStore
from bot.shipped import shipped_path
from tests.fakes.clock import until
from tests.fakes.recording_channel import RecordingChannel


class RecordingRunner(PipelineRunner):
    """Answers `echo: TEXT` and records each message it runs; a text in `held` waits for its event first."""

    def __init__(self) -> None:
        self.ran: list[InboundMessage] = []
        self.held: dict[str, asyncio.Event] = {}
        self.running: dict[str, asyncio.Task[object]] = {}

    async def run(self, inbound: InboundMessage, outbound: TurnOutbound) -> TurnContext | None:
        self.ran.append(inbound)
        if inbound.text in self.held:
            task = asyncio.ensure_future(self.held[inbound.text].wait())
            self.running[inbound.session_id] = task
            try:
                await task
            except asyncio.CancelledError:
                await outbound.reply(None)
                return None
            finally:
                del self.running[inbound.session_id]
        await outbound.reply(f"echo: {inbound.text}")
        return None

    async def in_chat_now(self, inbound: InboundMessage) -> InboundMessage:
        return inbound  # no chat changes its id here

    def interrupt(self, session_id: str) -> bool:
        task = self.running.get(session_id)
        if task is None:
            return False
        task.cancel()
        return True


def router_for(tmp_path: Path, runner: RecordingRunner, access: AccessPolicy | None = None) -> InboundRouter:
    commands = CommandRegistry()

    async def ping(request: CommandRequest) -> str:
        return f"pong {request.args}".strip()

    async def broken(request: CommandRequest) -> str:
        raise OSError(5, "Input/output error", "state/reminders.json")

    commands.register(Command("ping", "answers pong", ping))
    commands.register(Command("broken", "fails", broken))
    return InboundRouter(runner, commands, access, TurnLedger(LedgerFile(tmp_path / "turns.jsonl")))


async def test_messages_reach_the_runner_in_order_and_commands_are_answered_by_theirs(tmp_path: Path) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    for text in ("one", "/ping twice", "two", "/nope"):
        await router.accept(channel.message("1", text), channel)
    await router.dispatcher.drain()
    assert [inbound.text for inbound in runner.ran] == ["one", "two"]
    assert channel.sent["1"][:3] == ["echo: one", "pong twice", "echo: two"]
    assert channel.sent["1"][3].startswith("Unknown command /nope.")


async def test_a_command_that_fails_still_answers_and_the_next_message_is_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    for text in ("/broken", "one"):
        await router.accept(channel.message("1", text), channel)
    await router.dispatcher.drain()
    assert channel.sent["1"] == [
        "/broken failed: something went wrong on my side (the bot's log says what). Please try again.",
        "echo: one",
    ]
    assert "/broken failed" in caplog.text and "Input/output error" in caplog.text


async def test_a_transcribed_command_is_a_message_not_a_command(tmp_path: Path) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    spoken = dataclasses.replace(channel.message("1", "/ping"), transcribed=True)
    await router.accept(spoken, channel)
    await router.dispatcher.drain()
    assert channel.sent["1"] == ["echo: /ping"]


async def test_a_notice_and_files_this_router_cannot_take_are_answered_without_a_run(tmp_path: Path) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    message = channel.message("1", "")
    await router.accept(dataclasses.replace(message, notice="I can't watch videos yet."), channel)
    await router.accept(dataclasses.replace(message, attachment=Attachment("document", "f1")), channel)
    await router.accept(dataclasses.replace(message, attachment=Attachment("image", "f2")), channel)
    await router.dispatcher.drain()
    assert runner.ran == []
    assert channel.sent["1"] == [
        "I can't watch videos yet.",
        "I can't open files here.",
        "I can't take images or recordings here.",
    ]


async def test_a_refused_sender_gets_the_policys_reply_and_nothing_is_recorded_or_run(tmp_path: Path) -> None:
    (tmp_path / "runtime-config.json").write_text(json.dumps({"access": {"allowedUsers": [7]}}))
    store = RuntimeConfigStore(shipped_path("config") / "runtime-config.json", tmp_path / "runtime-config.json")
    access = AccessPolicy(store, PairingStore(tmp_path / "pairing.json"))
    runner, channel = RecordingRunner(), RecordingChannel()
    channel.channel_type = "telegram"
    router = router_for(tmp_path, runner, access)
    await router.accept(channel.message("8", "let me in", user_id="8"), channel)
    await router.accept(channel.message("7", "hello", user_id="7"), channel)
    await router.dispatcher.drain()
    assert channel.sent == {"8": [NOT_ALLOWED_REPLY], "7": ["echo: hello"]}
    assert [inbound.user_id for inbound in runner.ran] == ["7"]
    received = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert "let me in" not in json.dumps(received)  # a stranger's words are never stored


async def test_an_edit_of_a_queued_message_is_answered_as_edited(tmp_path: Path) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    first = runner.held["first"] = asyncio.Event()
    await router.accept(channel.message("1", "first"), channel)
    queued = dataclasses.replace(channel.message("1", "secnd"), message_id="m2")
    await router.accept(queued, channel)
    await router.accept(dataclasses.replace(queued, text="second", edited=True), channel)
    first.set()
    await router.dispatcher.drain()
    assert [inbound.text for inbound in runner.ran] == ["first", "second"]
    assert channel.sent["1"] == ["echo: first", "echo: second"]


async def test_stop_skips_the_queue_and_says_what_is_still_queued(tmp_path: Path) -> None:
    runner, channel = RecordingRunner(), RecordingChannel()
    router = router_for(tmp_path, runner)
    await router.accept(channel.message("1", "/stop"), channel)
    assert channel.sent["1"] == ["Nothing is running."]
    runner.held["slow"] = asyncio.Event()  # never set: only /stop ends it
    await router.accept(channel.message("1", "slow"), channel)
    await router.accept(channel.message("1", "next"), channel)
    await until(lambda: "test:1" in runner.running)
    await router.accept(channel.message("1", "/stop"), channel)
    assert channel.sent["1"][1] == "Stopped. I'll answer the 1 queued message(s) next."
    await router.dispatcher.drain()
    assert [inbound.text for inbound in runner.ran] == ["slow", "next"] and channel.sent["1"][2:] == ["echo: next"]

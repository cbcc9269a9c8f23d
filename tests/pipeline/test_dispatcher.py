"""`ChatDispatcher` on its own: each chat's turns in order, chats side by side, a failure or a cancelled
turn does not stop the ones queued behind it, a stop cancels what outlasts its grace."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.channels.base import Channel
from bot.ledger.turns import Turn
from bot.pipeline.dispatcher import ChatDispatcher
from tests.fakes.clock import until
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import WAIT_SECONDS


class Handler:
    """Records each turn's text as it starts and ends; a turn whose text is in `held` waits for its event."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[str] = []
        self.held: dict[str, asyncio.Event] = {}

    def hold(self, text: str) -> asyncio.Event:
        self.held[text] = asyncio.Event()
        return self.held[text]

    async def __call__(self, turn: Turn, channel: Channel) -> None:
        text = turn.inbound.text
        self.started.append(text)
        if text in self.held:
            await self.held[text].wait()
        if text == "fail":
            raise RuntimeError("the handler failed (injected)")
        if text == "cancel":
            raise asyncio.CancelledError
        self.ended.append(text)


def turn(channel: RecordingChannel, chat_id: str, text: str) -> Turn:
    return Turn.unrecorded(channel.message(chat_id, text))


async def test_a_chats_turns_run_one_at_a_time_in_order_while_another_chat_runs_beside() -> None:
    handler, channel = Handler(), RecordingChannel()
    dispatcher = ChatDispatcher(handler)
    first = handler.hold("a1")
    for text in ("a1", "a2", "a3"):
        assert dispatcher.submit(turn(channel, "a", text), channel)
    assert dispatcher.submit(turn(channel, "b", "b1"), channel)
    # Chat b is not held up by chat a, and its worker ends with its queue.
    await until(lambda: dispatcher.queue_depths() == {"test:a": 3})
    assert handler.started == ["a1", "b1"] and handler.ended == ["b1"] and dispatcher.pending("test:a") == 2
    first.set()
    await dispatcher.drain()
    assert handler.ended == ["b1", "a1", "a2", "a3"]
    assert dispatcher.queue_depths() == {} and dispatcher.pending("test:a") == 0  # idle chats cost nothing


async def test_a_failed_or_cancelled_turn_is_logged_and_the_next_one_is_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    handler, channel = Handler(), RecordingChannel()
    dispatcher = ChatDispatcher(handler)
    for text in ("fail", "cancel", "after"):
        dispatcher.submit(turn(channel, "a", text), channel)
    await dispatcher.drain()
    assert handler.ended == ["after"]
    assert "Handling a message of test:a failed" in caplog.text and "Run in test:a interrupted" in caplog.text


async def test_close_lets_a_short_run_finish_and_then_takes_nothing() -> None:
    handler, channel = Handler(), RecordingChannel()
    dispatcher = ChatDispatcher(handler)
    release = handler.hold("slow")
    dispatcher.submit(turn(channel, "a", "slow"), channel)
    await until(lambda: handler.started == ["slow"])
    closing = asyncio.create_task(dispatcher.close(grace_seconds=WAIT_SECONDS))
    await asyncio.sleep(0)
    assert not dispatcher.submit(turn(channel, "a", "too late"), channel)
    release.set()
    await closing
    assert handler.ended == ["slow"]


async def test_close_cancels_a_run_that_outlasts_the_grace(caplog: pytest.LogCaptureFixture) -> None:
    handler, channel = Handler(), RecordingChannel()
    dispatcher = ChatDispatcher(handler)
    handler.hold("stuck")  # never released
    dispatcher.submit(turn(channel, "a", "stuck"), channel)
    dispatcher.submit(turn(channel, "a", "behind"), channel)
    await until(lambda: handler.started == ["stuck"])
    await dispatcher.close(grace_seconds=0.01)
    assert handler.ended == [] and dispatcher.queue_depths() == {}
    assert "Cancelling 1 chats still running" in caplog.text
    await dispatcher.drain()  # nothing is left waiting

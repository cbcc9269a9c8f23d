"""`Outbound`: the one step that sends a turn's reply, its live edits, errors and notes, and records the turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bot.domain.session import AgentSession
from bot.ledger.store import LedgerFile
from bot.ledger.turns import Turn, TurnLedger, TurnState
from bot.pipeline import outbound
from bot.pipeline.outbound import Outbound
from tests.fakes.recording_channel import RecordingChannel


def records(tmp_path: Path) -> list[str]:
    return [next(iter(json.loads(line))) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]


async def received_hello(tmp_path: Path, channel: RecordingChannel) -> tuple[TurnLedger, Turn, str]:
    """A ledger in `tmp_path` that has received "hello" in chat 1: the ledger, the turn and its id."""
    ledger = TurnLedger(LedgerFile(tmp_path / "turns.jsonl"))
    await ledger.load()
    turn = await ledger.receive(channel.message("1", "hello"))
    assert turn.id is not None
    return ledger, turn, turn.id


def unrecorded(channel: RecordingChannel) -> Turn:
    return Turn.unrecorded(channel.message("1", "hello"))


async def test_a_reply_is_recorded_answered_sent_then_recorded_delivered(tmp_path: Path) -> None:
    channel = RecordingChannel()
    ledger, received, turn_id = await received_hello(tmp_path, channel)
    turn = Outbound().for_turn(channel, received)
    assert await turn.reply("Hi!")
    assert channel.sent["1"] == ["Hi!"]
    assert records(tmp_path) == ["received", "answered", "delivered"]
    assert ledger.state(turn_id) is TurnState.DELIVERED
    await received.delivered()  # the end of the handling: recorded once already
    assert records(tmp_path) == ["received", "answered", "delivered"]


async def test_a_reply_the_session_holds_already_is_not_recorded_answered_on_its_way_out(tmp_path: Path) -> None:
    channel = RecordingChannel()
    ledger, received, turn_id = await received_hello(tmp_path, channel)
    turn = Outbound().for_turn(channel, received)
    assert await turn.reply("Hi!", stored=True)  # a restart would find "Hi!" in the session
    assert channel.sent["1"] == ["Hi!"]
    assert records(tmp_path) == ["received", "delivered"]
    assert ledger.state(turn_id) is TurnState.DELIVERED


async def test_a_streamed_reply_is_finished_in_place_and_a_footnote_follows_on_its_own(tmp_path: Path) -> None:
    channel = RecordingChannel(streaming=True)
    turn = Outbound().for_turn(channel, unrecorded(channel))
    stream = turn.open_stream()
    assert stream is not None
    await stream.update("Hel")
    assert await turn.reply("Hello!", "(I could not save this conversation.)")
    assert channel.stream_updates["1"] == ["Hel"]
    assert channel.sent["1"] == ["Hello!", "(I could not save this conversation.)"]


async def test_an_error_reply_goes_as_one_message_with_its_footnote_even_when_streaming(tmp_path: Path) -> None:
    channel = RecordingChannel(streaming=True)
    turn = Outbound().for_turn(channel, unrecorded(channel))
    turn.open_stream()
    assert not await turn.reply("The model timed out.", "(I could not save it.)", failed=True)
    assert channel.sent["1"] == ["The model timed out.\n\n(I could not save it.)"]


async def test_a_reply_that_cannot_be_sent_is_not_sent_again_and_the_turn_is_delivered(tmp_path: Path) -> None:
    channel = RecordingChannel(fail_sends=1)
    ledger, received, turn_id = await received_hello(tmp_path, channel)
    turn = Outbound().for_turn(channel, received)
    assert not await turn.reply("Hi!")
    assert channel.sent["1"] == []
    assert ledger.state(turn_id) is TurnState.DELIVERED  # the user can ask again; no loop of retries


async def test_a_reply_recorded_before_a_stop_is_what_a_resumed_turn_is_sent(tmp_path: Path) -> None:
    channel = RecordingChannel()
    _, received, _ = await received_hello(tmp_path, channel)
    await received.answered("Hi!")
    restarted = TurnLedger(LedgerFile(tmp_path / "turns.jsonl"))

    async def no_session(session_id: str) -> AgentSession | None:
        return None

    [reopened] = await restarted.reopen(no_session, {"test"})
    turn = Outbound().for_turn(channel, reopened)
    reply = reopened.resume(AgentSession.new("test", "1"))
    assert reply == "Hi!" and not reopened.settled
    await turn.resend(reply)
    assert channel.sent["1"] == ["Hi!"] and reopened.settled
    assert await TurnLedger(LedgerFile(tmp_path / "turns.jsonl")).load() == []


async def test_a_typing_indicator_on_its_way_when_the_answer_is_ready_is_let_finish_not_cancelled() -> None:
    # Cancelling a Bot API request waiting for a pooled connection can leave the connection occupied for
    # good (httpcore 1.0.9): once the whole pool is, no reply goes out. So the indicator is never cut short.
    release = asyncio.Event()
    finished: list[str] = []

    class SlowTyping(RecordingChannel):
        async def send_typing(self, chat_id: str) -> None:
            await release.wait()
            finished.append(chat_id)

    channel = SlowTyping()
    turn = Outbound().for_turn(channel, unrecorded(channel))
    async with turn.typing():
        await asyncio.sleep(0)  # the indicator is on its way
    assert await turn.reply("Hi!")  # the reply does not wait for it
    release.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert finished == ["1"] and channel.sent["1"] == ["Hi!"]


async def test_the_typing_indicator_is_sent_again_while_the_answer_takes_and_stops_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbound, "TYPING_REFRESH_SECONDS", 0.05)
    sent: list[float] = []

    class Typing(RecordingChannel):
        async def send_typing(self, chat_id: str) -> None:
            sent.append(asyncio.get_running_loop().time())

    channel = Typing()
    turn = Outbound().for_turn(channel, unrecorded(channel))
    async with turn.typing():
        await asyncio.sleep(0.23)
    at_the_end = len(sent)
    assert 3 <= at_the_end <= 6  # at once, then about every 0.05 s
    await asyncio.sleep(0.2)
    assert len(sent) == at_the_end  # none after the body ended


async def test_a_typing_indicator_still_on_its_way_is_not_sent_again_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbound, "TYPING_REFRESH_SECONDS", 0.02)
    release = asyncio.Event()
    started: list[str] = []

    class SlowTyping(RecordingChannel):
        async def send_typing(self, chat_id: str) -> None:
            started.append(chat_id)
            await release.wait()

    channel = SlowTyping()
    turn = Outbound().for_turn(channel, unrecorded(channel))
    async with turn.typing():
        await asyncio.sleep(0.15)
        assert started == ["1"]  # a slow Telegram does not get a pile of them
        release.set()
        await asyncio.sleep(0.1)
    assert len(started) >= 2

"""Under load the bot loses nothing, repeats nothing, keeps each chat's order and does not grow.

The real `python -m bot run` talks to the fake Telegram Bot API and to a fake model that takes
200 ms per answer (it echoes the user's text, so each reply names the message it answers). Many
chats write at once: each keeps two messages waiting for an answer, and sends the next as soon as
one is answered, like impatient people do. Then every chat must have received exactly one reply
per message, in the order sent; the bot's log must hold no error; and its resident memory in the
last stretch of the load must not have grown past a small bound over the first stretch.

The full form (200 chats for a minute, per backend) runs with `pytest -m load` or `BOT_LOAD_FULL=1`;
the suite otherwise runs a short form (50 chats for 8 seconds).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.bot_processes import BotProcess
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_responder
from tests.fakes.telegram_server import FakeTelegram, RecordedCall
from tests.reliability.bot_process import bad_log_lines, start_bot, stop

MODEL_SECONDS = 0.2
IN_FLIGHT_PER_CHAT = 2
FIRST_CHAT = 70_000
SAMPLE_SECONDS = 0.5
MAX_RSS_GROWTH_MIB = 20.0
MAX_RSS_GROWTH_SHARE = 0.15
START_TIMEOUT_SECONDS = 60.0
DRAIN_TIMEOUT_SECONDS = 180.0

BACKENDS = ["ptb", "aiogram"]


@dataclass
class LoadRun:
    """What the load did: messages sent per chat, replies seen, and the bot's RSS over time."""

    chats: list[int]
    sent: dict[int, int] = field(default_factory=dict)
    answered: dict[int, int] = field(default_factory=dict)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the load, MiB)
    seconds: float = 0.0  # of load
    answered_in_load: int = 0  # replies that arrived while the load ran (after the warm-up)
    drain_seconds: float = 0.0  # from the end of the load to the last reply

    @property
    def total_sent(self) -> int:
        return sum(self.sent.values())


def text_of(chat: int, number: int) -> str:
    return f"chat {chat} message {number}"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmRSS for process {pid}")


def slow_echo(body: dict[str, Any]) -> Reply:
    return Reply(text=echo_responder(body).text, delay=MODEL_SECONDS)


class ReplyCounter:
    """Counts the successful sendMessage calls per chat as they finish, reading only new calls each time."""

    def __init__(self, telegram: FakeTelegram, run: LoadRun) -> None:
        self._telegram = telegram
        self._run = run
        self._seen = 0
        self._in_flight: list[RecordedCall] = []

    def update(self) -> None:
        calls = self._telegram.calls
        self._in_flight += [call for call in calls[self._seen :] if call.method == "sendMessage"]
        self._seen = len(calls)
        waiting = []
        for call in self._in_flight:
            if call.status is None:
                waiting.append(call)
            elif call.ok:
                chat = call.params["chat_id"]
                self._run.answered[chat] = self._run.answered.get(chat, 0) + 1
        self._in_flight = waiting


def push(telegram: FakeTelegram, run: LoadRun, chat: int) -> None:
    telegram.push_message(chat, text_of(chat, run.sent.get(chat, 0)))
    run.sent[chat] = run.sent.get(chat, 0) + 1


def drive(telegram: FakeTelegram, process: BotProcess, run: LoadRun, seconds: float) -> None:
    """Warm up (one answered message per chat), then keep every chat busy for `seconds`, then drain."""
    counter = ReplyCounter(telegram, run)
    telegram.wait_until(lambda: bool(telegram.calls_to("getUpdates")), START_TIMEOUT_SECONDS, "the bot to poll")
    for chat in run.chats:
        push(telegram, run, chat)

    def all_answered() -> bool:
        counter.update()
        return all(run.answered.get(chat, 0) >= run.sent[chat] for chat in run.chats)

    telegram.wait_until(all_answered, START_TIMEOUT_SECONDS, "the warm-up replies")
    started = time.monotonic()
    next_sample = started
    while (now := time.monotonic()) < started + seconds:
        assert process.poll() is None, f"the bot exited with {process.returncode} under load"
        counter.update()
        for chat in run.chats:
            while run.sent[chat] - run.answered.get(chat, 0) < IN_FLIGHT_PER_CHAT:
                push(telegram, run, chat)
        if now >= next_sample:
            run.rss.append((now - started, rss_mib(process.pid)))
            next_sample += SAMPLE_SECONDS
        time.sleep(0.05)
    run.seconds = time.monotonic() - started
    counter.update()
    run.answered_in_load = sum(run.answered.values()) - len(run.chats)
    telegram.wait_until(all_answered, DRAIN_TIMEOUT_SECONDS, "every reply")
    run.drain_seconds = time.monotonic() - started - run.seconds


def rss_window_seconds(run: LoadRun) -> float:
    return min(20.0, run.seconds / 3)


def rss_windows(run: LoadRun) -> tuple[float, float]:
    """Median RSS over the first and over the last stretch of the load."""
    window = rss_window_seconds(run)
    first = [mib for at, mib in run.rss if at < window]
    last = [mib for at, mib in run.rss if at >= run.seconds - window]
    assert first and last, f"too few RSS samples: {run.rss}"
    return statistics.median(first), statistics.median(last)


def check(run: LoadRun, telegram: FakeTelegram, model: FakeOpenAI, log: Path) -> str:
    bad_lines = bad_log_lines(log)
    assert not bad_lines, "errors in the bot's log:\n" + "\n".join(bad_lines[:20])
    for chat in run.chats:
        expected = [f"echo: {text_of(chat, number)}" for number in range(run.sent[chat])]
        replies = telegram.visible_text(chat)
        assert replies == expected, f"chat {chat}: lost, repeated or reordered replies"
        assert len(telegram.sent_messages(chat)) == run.sent[chat], f"chat {chat}: a reply sent twice"
    assert len(model.chat_requests()) == run.total_sent, "the model was asked more (or less) than once per message"
    first, last = rss_windows(run)
    bound = max(MAX_RSS_GROWTH_MIB, MAX_RSS_GROWTH_SHARE * first)
    assert last - first <= bound, f"RSS grew from {first:.0f} to {last:.0f} MiB under steady load (bound {bound:.0f})"
    return (
        f"{len(run.chats)} chats, {run.total_sent} messages ({len(run.chats)} warm-up), each answered once and in "
        f"order; {run.answered_in_load} answered during {run.seconds:.0f} s of load "
        f"({run.answered_in_load / run.seconds:.0f}/s), the last {run.drain_seconds:.1f} s after it; bot RSS "
        f"median {first:.0f} MiB in the first {rss_window_seconds(run):.0f} s, {last:.0f} MiB in the last, "
        f"peak {max(mib for _, mib in run.rss):.0f} MiB"
    )


def run_load(tmp_path: Path, backend: str, chats: int, seconds: float) -> str:
    run = LoadRun(chats=list(range(FIRST_CHAT, FIRST_CHAT + chats)))
    log = tmp_path / "bot-stderr.log"
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.set_responder(slow_echo)
        config = {"access": {"allowedUsers": run.chats}}
        process = start_bot(tmp_path / "workspace", backend, model, telegram, log, config)
        try:
            drive(telegram, process, run, seconds)
        finally:
            stop(process)
        assert process.returncode == 0, f"the bot exited with {process.returncode}"
        return check(run, telegram, model, log)


def full_load_requested(config: pytest.Config) -> bool:
    return os.environ.get("BOT_LOAD_FULL") == "1" or "load" in (config.option.markexpr or "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fifty_chats_at_once_lose_nothing(tmp_path: Path, backend: str) -> None:
    print(run_load(tmp_path, backend, chats=50, seconds=8.0))


@pytest.mark.load
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_hundred_chats_for_a_minute_lose_nothing(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if not full_load_requested(request.config):
        pytest.skip("the full load test runs with `pytest -m load` or BOT_LOAD_FULL=1")
    print(run_load(tmp_path, backend, chats=200, seconds=60.0))

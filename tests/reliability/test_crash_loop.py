"""Crash consistency: the real bot is killed (SIGKILL) at random moments while five chats keep writing.

`python -m bot run` (each backend) talks to the fake Telegram Bot API and to a fake model that echoes
the user's last message ("echo: <text>") after 50-300 ms, so runs are in progress when a kill comes.
Users write at a steady rate across the chats, through every kill and restart (each chat waits while
it has `MAX_UNANSWERED` messages without a reply, so the backlog stays bounded however slowly the bot
starts). Each round starts the bot and kills it at a seeded random moment: during its start-up, or
while it polls and answers. After the last kill the users stop, one more bot answers whatever is left
and is stopped with SIGTERM. Then, with the bot's own readers where it has them:

- every JSON file in the workspace parses, every session loads, and none was quarantined as corrupt;
- every JSONL file (archive, memory items, inbox, RAG queue ...) and every daily note holds whole lines
  only: a torn last line (a write cut short) is tolerated only because the bot's reader skips it and
  the next append cuts it off, and the reader must then read every other line;
- MEMORY.md is valid UTF-8;
- the archive holds every message a user sent, once and in the order sent;
- every message got a reply, "echo: <its text>", each chat's replies kept its order, and no reply was
  sent twice, with one exception that cannot be closed: a kill after Telegram took a reply and before
  the bot recorded it delivered (the turn ledger shows it answered, or the session holds its answer and
  the ledger the turn open) makes the next start send it again.
  Right after each kill the test reads the turn ledger (with the bot's reader) and the sessions to see
  which replies are in that state; a second copy of exactly those is expected (and counted), any other
  repeat fails the test.

So that kills often fall between "answered" and "delivered", some sends are slow: held before Telegram
takes them (the kill finds the reply recorded and not sent: the next start must send it), or taken at
once and answered late (the kill finds it sent and not recorded delivered: the one expected repeat).

Size: `BOT_CRASH_LOOPS` kills per backend; unless set, the suite's short form (`SHORT_LOOPS`). The
long form:

    BOT_CRASH_LOOPS=100 .venv/bin/python -m pytest -m crash -s tests/reliability/test_crash_loop.py

The seed is random unless `BOT_CRASH_SEED` is set; it is printed and is part of every failure message.
It fixes the kill schedule, the chat each message goes to and the model's delays; the timing of the
processes themselves cannot be replayed exactly.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import re
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.domain.message import Message, Role
from bot.domain.session import AgentSession
from bot.ledger.store import LedgerFile
from bot.ledger.turns import OpenTurn, TurnLedger, stored_answer, stored_question
from bot.memory.item_files import parse_items
from bot.rag.documents import RagDocument
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles
from bot.storage.jsonl import parse_jsonl
from tests.bot_processes import BotProcess
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_responder
from tests.fakes.telegram_server import FakeTelegram, Fault, SentMessage
from tests.reliability.bot_process import bad_log_lines, start_bot

BACKENDS = ["ptb", "aiogram"]
CHATS = list(range(81_001, 81_006))
# The suite's short form, about 40 s for both. Every kill costs a restart, and importing aiogram alone
# takes ~4 s of each: it gets fewer, as what the kills test (journal, sessions, archive, delivery) is the
# same code for both backends.
SHORT_LOOPS = {"ptb": 6, "aiogram": 2}
PUSH_INTERVAL_SECONDS = 0.2  # five messages a second across the chats, kills and restarts included
MAX_UNANSWERED = 8  # per chat: a user with this many messages unanswered waits before writing more
MODEL_DELAY_SECONDS = (0.05, 0.3)
RUNTIME_CONFIG = {"access": {"allowedUsers": CHATS}, "telegram": {"pollingTimeoutSeconds": 1}}
STARTUP_KILL_SHARE = 0.25  # this share of the kills hits the start-up, the rest a bot that polls
RUNNING_KILL_SECONDS = (0.0, 2.5)  # how long after its first getUpdates a polling bot is killed
START_TIMEOUT_SECONDS = 60.0
DRAIN_TIMEOUT_SECONDS = 180.0
QUIET_SECONDS = 8.0  # the drain gives up early once nothing is waiting and no reply came for this long
SETTLE_SECONDS = 1.5  # after the last expected reply: time for a late duplicate to show
SLOW_SEND_SECONDS = 0.4  # a slow sendMessage, to widen the window between "answered" and "delivered"
SLOW_SENDS_PER_RUN = 6  # of each kind, the first sends of every run
DAILY_NOTE_LINE = re.compile(r"\[\d\d:\d\d\] User: .* \| Assistant: .*")
DAILY_NOTE_FILE = re.compile(r"\d{4}-\d\d-\d\d\.md")


def crash_loops(backend: str) -> int:
    return int(os.environ.get("BOT_CRASH_LOOPS") or SHORT_LOOPS[backend])


def text_of(chat: int, number: int) -> str:
    # Long enough that each exchange goes to the RAG indexing queue too; no Markdown in it.
    return f"chat {chat} message {number}: please keep the number {number * 7919 % 1000} in mind"


def reply_to(text: str) -> str:
    return f"echo: {text}"


@dataclass
class Kill:
    """One SIGKILL, and what it left half-done (read from the files before the next start)."""

    number: int
    phase: str  # "start-up" or "running"
    at: float  # time.time() of the kill, comparable with the fake's call times
    sent_not_done: list[str] = field(default_factory=list)  # replies Telegram has, the ledger not delivered
    sent_before_kill_ms: list[float] = field(default_factory=list)  # for each: how long before the kill
    answered_not_sent: list[str] = field(default_factory=list)  # replies the ledger holds, never sent
    stored_not_sent: list[str] = field(default_factory=list)  # answers in the session, not yet sent
    archived_not_in_session: list[str] = field(default_factory=list)  # user messages in the archive only


@dataclass
class CrashRun:
    """What happened: the seed, the kills, and what each chat sent."""

    backend: str
    seed: int
    kills: list[Kill] = field(default_factory=list)
    sent: dict[int, list[str]] = field(default_factory=lambda: {chat: [] for chat in CHATS})
    started: float = field(default_factory=time.monotonic)

    @property
    def total_sent(self) -> int:
        return sum(len(texts) for texts in self.sent.values())

    def describe(self) -> str:
        return f"backend {self.backend}, seed {self.seed} (replay with BOT_CRASH_SEED={self.seed})"


def replies_by_chat(telegram: FakeTelegram) -> dict[int, list[SentMessage]]:
    replies: dict[int, list[SentMessage]] = {chat: [] for chat in CHATS}
    for message in telegram.sent_messages():
        replies.setdefault(int(message.chat_id), []).append(message)
    return replies


class Users(threading.Thread):
    """People writing at a steady rate, each message to a (seeded) random chat, until stopped."""

    def __init__(self, telegram: FakeTelegram, run: CrashRun, rng: random.Random) -> None:
        super().__init__(name="crash-loop users", daemon=True)
        self._telegram = telegram
        self._run = run
        self._rng = rng
        self._stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stopping.wait(PUSH_INTERVAL_SECONDS):
                chat = self._rng.choice(CHATS)
                sent = self._run.sent[chat]
                if len(sent) - len(replies_by_chat(self._telegram)[chat]) >= MAX_UNANSWERED:
                    continue  # this person waits for answers first
                text = text_of(chat, len(sent))
                self._telegram.push_message(chat, text)
                sent.append(text)
        except BaseException as error:  # reported by the test, not lost in a thread
            self.error = error

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
        assert self.error is None, f"pushing messages failed: {self.error!r}"


def slow_echo(rng: random.Random) -> Callable[[dict[str, Any]], Reply]:
    """The echo model with a seeded random delay, so kills find runs waiting for it."""
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> Reply:
        with lock:
            delay = rng.uniform(*MODEL_DELAY_SECONDS)
        return Reply(text=echo_responder(body).text, delay=delay)

    return respond


def start(
    workspace: Path, backend: str, model: FakeOpenAI, telegram: FakeTelegram, log: Path, label: str
) -> BotProcess:
    with log.open("ab") as handle:
        handle.write(f"===== {label} =====\n".encode())
    telegram.clear_faults()
    for _ in range(SLOW_SENDS_PER_RUN):  # alternating, so a kill soon after the start finds either
        telegram.fail_next("sendMessage", Fault.slow(SLOW_SEND_SECONDS))
        telegram.fail_next("sendMessage", Fault.timeout(SLOW_SEND_SECONDS, apply=True))
    return start_bot(workspace, backend, model, telegram, log, RUNTIME_CONFIG)


def polls_since(telegram: FakeTelegram, first_call: int) -> bool:
    return any(call.method == "getUpdates" for call in telegram.calls[first_call:])


# What a kill left: read from the files while no bot runs.


def read_session(workspace: Path, chat: int) -> AgentSession:
    path = workspace / "sessions" / f"telegram:{chat}.json"
    if not path.exists():
        return AgentSession.new("telegram", str(chat))
    return AgentSession.model_validate_json(path.read_bytes())


def loaded_session(workspace: Path, chat: int) -> AgentSession:
    """The session as the next start loads it (the bot's reader): its file and the messages archived after it."""
    loaded = asyncio.run(SessionService(SessionFiles(workspace / "sessions")).get(f"telegram:{chat}"))
    return loaded or AgentSession.new("telegram", str(chat))


def read_archive_ids(workspace: Path, chat: int) -> set[str]:
    path = workspace / "sessions" / "archive" / f"telegram:{chat}.jsonl"
    if not path.exists():
        return set()
    return {str(record.get("id")) for record in parse_jsonl(path.read_text(encoding="utf-8"), path)}


def open_turns(workspace: Path) -> list[OpenTurn]:
    """The turn ledger's open turns, read with the bot's reader from a copy (reading compacts the file)."""
    path = workspace / "state" / "turns.jsonl"
    if not path.exists():
        return []
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "turns.jsonl"
        shutil.copyfile(path, copy)
        return asyncio.run(TurnLedger(LedgerFile(copy)).load())


def inspect_after_kill(kill: Kill, workspace: Path, telegram: FakeTelegram) -> None:
    """Note the messages the kill caught between two writes, to tell expected repeats from bugs."""
    telegram.wait_until(
        lambda: all(call.status is not None for call in telegram.calls_to("sendMessage")),
        timeout=2.0 + SLOW_SEND_SECONDS,
        what="sends in flight at the kill to finish",
    )
    delivered = {message.text: message.time for message in telegram.sent_messages()}
    sessions = {chat: read_session(workspace, chat) for chat in CHATS}
    for turn in open_turns(workspace):
        chat, text, turn_id = int(turn.inbound.chat_id), turn.inbound.text, turn.turn_id
        session = sessions[chat]
        if turn.reply is not None:
            if turn.reply in delivered:
                kill.sent_not_done.append(text)
                kill.sent_before_kill_ms.append(1000 * (kill.at - delivered[turn.reply]))
            else:
                kill.answered_not_sent.append(text)
        elif stored_question(session, turn_id) is not None:
            # The session's answer is what the ledger would hold: it is recorded "answered" only when not stored.
            note_stored_answer(kill, text, stored_answer(session, turn_id), delivered)
        elif turn_id in read_archive_ids(workspace, chat):
            kill.archived_not_in_session.append(text)
            # The next start reads the archived messages back into the session, the answer among them.
            note_stored_answer(kill, text, stored_answer(loaded_session(workspace, chat), turn_id), delivered)


def note_stored_answer(kill: Kill, text: str, answer: Message | None, delivered: dict[str, float]) -> None:
    """A stored answer Telegram has (the next start sends it again) or has not (the next start sends it)."""
    if answer is not None and answer.content in delivered:
        kill.sent_not_done.append(text)
        kill.sent_before_kill_ms.append(1000 * (kill.at - delivered[answer.content]))
    elif answer is not None:
        kill.stored_not_sent.append(text)


def kill_loop(
    workspace: Path, run: CrashRun, rng: random.Random, model: FakeOpenAI, telegram: FakeTelegram, log: Path
) -> None:
    startup_seconds = 2.0  # a first guess; then what the last bot took to its first getUpdates
    for number in range(1, crash_loops(run.backend) + 1):
        first_call = len(telegram.calls)
        spawned = time.monotonic()
        process = start(workspace, run.backend, model, telegram, log, f"run {number}")
        if rng.random() < STARTUP_KILL_SHARE:
            phase = "start-up"
            time.sleep(rng.uniform(0.0, startup_seconds))
        else:
            phase = "running"
            polling = functools.partial(polls_since, telegram, first_call)
            telegram.wait_until(polling, START_TIMEOUT_SECONDS, "the bot to poll")
            startup_seconds = time.monotonic() - spawned
            time.sleep(rng.uniform(*RUNNING_KILL_SECONDS))
        exited = process.poll()
        kill = Kill(number, phase, time.time())
        process.kill()
        process.wait(timeout=10)
        assert exited is None, f"{run.describe()}: run {number} exited by itself ({exited}); see {log}"
        inspect_after_kill(kill, workspace, telegram)
        run.kills.append(kill)


def drain(run: CrashRun, telegram: FakeTelegram) -> None:
    """Wait until every message has a reply, or until nothing is waiting and the bot fell quiet."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        replies = replies_by_chat(telegram)
        # Each message's own reply, not a count: a reply sent twice must not stand in for one still to come.
        answered = {chat: {message.text for message in replies[chat]} for chat in CHATS}
        if all(reply_to(text) in answered[chat] for chat in CHATS for text in run.sent[chat]):
            time.sleep(SETTLE_SECONDS)
            return
        count = sum(len(texts) for texts in replies.values())
        if count != last_count:
            last_count, last_change = count, time.monotonic()
        elif telegram.pending_update_count() == 0 and time.monotonic() - last_change > QUIET_SECONDS:
            return  # something is missing for good: the checks say what
        time.sleep(0.2)


# The checks.


@dataclass
class FileReport:
    problems: list[str] = field(default_factory=list)
    torn_tails: list[str] = field(default_factory=list)
    checked: int = 0


def check_jsonl(path: Path, name: str, report: FileReport) -> None:
    text = path.read_bytes().decode("utf-8")
    *complete, tail = text.split("\n")
    whole = [line for line in complete if line.strip()]
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            report.problems.append(f"{name} line {number} does not parse: {error}")
            continue
        if not isinstance(value, dict):
            report.problems.append(f"{name} line {number} is not a JSON object")
    if tail.strip():
        try:
            json.loads(tail)
            whole.append(tail)
        except json.JSONDecodeError:
            report.torn_tails.append(name)
    read = parse_jsonl(text, path)  # the bot's reader: skips a torn tail, must keep everything else
    if len(read) != len(whole):
        report.problems.append(f"{name}: the bot's reader read {len(read)} of {len(whole)} whole lines")


def check_workspace_files(workspace: Path) -> FileReport:
    """Every file the bot keeps, read strictly, and read again with the bot's own readers."""
    report = FileReport()
    for path in sorted(workspace.rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(workspace))
        report.checked += 1
        if ".corrupt-" in path.name:
            report.problems.append(f"{name}: a file was found unreadable and quarantined")
        elif path.name.endswith(".tmp"):
            report.problems.append(f"{name}: a temp file of an interrupted write was left behind")
        elif path.suffix == ".json":
            try:
                json.loads(path.read_bytes())
            except ValueError as error:
                report.problems.append(f"{name} does not parse: {error}")
        elif path.suffix == ".jsonl":
            check_jsonl(path, name, report)
        elif path.suffix == ".md":
            try:
                text = path.read_bytes().decode("utf-8")
            except UnicodeDecodeError as error:
                report.problems.append(f"{name} is not UTF-8: {error}")
                continue
            if DAILY_NOTE_FILE.fullmatch(path.name):
                *complete, tail = text.split("\n")
                bad = [line for line in complete if line.strip() and not DAILY_NOTE_LINE.fullmatch(line)]
                report.problems += [f"{name}: not a daily note line: {line[:120]!r}" for line in bad]
                if tail:
                    report.torn_tails.append(name)
    for path in sorted((workspace / "memory" / "items").rglob("*.jsonl")):
        text = path.read_text(encoding="utf-8")
        lines = [line for line in text.split("\n")[:-1] if line.strip()]
        if len(parse_items(text, path)) != len(lines):
            report.problems.append(f"{path.relative_to(workspace)}: some whole lines are not memory items")
    rag_queue = workspace / "rag" / "documents.jsonl"
    if rag_queue.exists():
        for record in parse_jsonl(rag_queue.read_text(encoding="utf-8"), rag_queue):
            try:
                RagDocument.from_json(record)
            except (KeyError, TypeError, ValueError) as error:
                report.problems.append(f"rag/documents.jsonl: a record the RAG queue cannot read: {error}")
    if not (workspace / "memory" / "MEMORY.md").is_file():
        report.problems.append("memory/MEMORY.md is gone")
    return report


async def read_conversations(workspace: Path, run: CrashRun) -> tuple[dict[int, list[Message]], list[str]]:
    """Each chat's archive and session, through `SessionService` (as the bot reads them)."""
    sessions = SessionService(SessionFiles(workspace / "sessions"))
    archives: dict[int, list[Message]] = {}
    problems = []
    for chat in CHATS:
        session_id = f"telegram:{chat}"
        # A chat the random users never wrote to has no session, rightly.
        if run.sent[chat] and await sessions.get(session_id) is None:
            problems.append(f"{session_id}: no readable session")
        archives[chat] = await sessions.read_archive(session_id)
    return archives, problems


@dataclass
class Tally:
    lost: int = 0
    expected_repeats: int = 0  # replies sent again after a kill between Telegram taking them and the inbox
    problems: list[str] = field(default_factory=list)


def check_replies(run: CrashRun, telegram: FakeTelegram) -> Tally:
    """Lost, repeated and reordered replies; a repeat is fine only where a kill left it sent but not done."""
    tally = Tally()
    repeat_expected = Counter(text for kill in run.kills for text in kill.sent_not_done)
    replies = replies_by_chat(telegram)
    for chat in CHATS:
        expected = [reply_to(text) for text in run.sent[chat]]
        got = [message.text for message in replies[chat]]
        counts = Counter(got)
        for text in run.sent[chat]:
            copies = counts[reply_to(text)]
            if copies == 0:
                tally.lost += 1
                tally.problems.append(f"chat {chat}: no reply to {text!r}{lost_reason(run, text)}")
            elif copies > 1 + repeat_expected[text]:
                times = [m.time for m in replies[chat] if m.text == reply_to(text)]
                tally.problems.append(f"chat {chat}: {copies} replies to {text!r}; {kills_between(run, times)}")
            else:
                tally.expected_repeats += copies - 1
        unexpected = sorted(set(got) - set(expected))
        tally.problems += [f"chat {chat}: a reply to nothing that was sent: {text!r}" for text in unexpected]
        first_copies = list(dict.fromkeys(text for text in got if text in set(expected)))
        if first_copies != [text for text in expected if text in counts]:
            tally.problems.append(f"chat {chat}: replies out of the order the messages were sent")
    return tally


def lost_reason(run: CrashRun, text: str) -> str:
    for kill in run.kills:
        if text in kill.answered_not_sent:
            return f" (kill {kill.number} came after its reply was recorded answered and before it was sent)"
        if text in kill.stored_not_sent:
            return f" (kill {kill.number} came after its answer was stored and before it was recorded)"
    return ""


def kills_between(run: CrashRun, times: list[float]) -> str:
    kills = [kill for kill in run.kills if times[0] <= kill.at <= times[-1]]
    if not kills:
        return "no kill in between"
    kill = kills[0]
    return f"first copy {1000 * (kill.at - times[0]):.0f} ms before kill {kill.number} ({kill.phase})"


def check_archive(run: CrashRun, archives: dict[int, list[Message]]) -> list[str]:
    problems = []
    for chat in CHATS:
        users = [message.content for message in archives[chat] if message.role is Role.USER]
        if users == run.sent[chat]:
            continue
        have = Counter(users)
        missing = [text for text in run.sent[chat] if have[text] == 0]
        twice = [text for text in run.sent[chat] if have[text] > 1]
        problems.append(
            f"chat {chat}: the archive has {len(users)} user messages for {len(run.sent[chat])} sent; "
            f"missing {missing[:3]}, stored twice {twice[:3]}" + ("" if missing or twice else ", out of order")
        )
    return problems


def raw_archive_repeats(workspace: Path) -> int:
    """Lines of the archive files that repeat a message id (the bot's reader counts such a message once)."""
    repeats = 0
    for path in (workspace / "sessions" / "archive").glob("*.jsonl"):
        ids = [record.get("id") for record in parse_jsonl(path.read_text(encoding="utf-8"), path)]
        repeats += len(ids) - len(set(ids))
    return repeats


def check(run: CrashRun, telegram: FakeTelegram, workspace: Path, log: Path) -> str:
    files = check_workspace_files(workspace)
    archives, session_problems = asyncio.run(read_conversations(workspace, run))
    replies = check_replies(run, telegram)
    problems = files.problems + session_problems + check_archive(run, archives) + replies.problems
    problems += [f"bot log: {line}" for line in bad_log_lines(log)[:20]]
    phases = Counter(kill.phase for kill in run.kills)

    def caught(kind: Callable[[Kill], list[str]]) -> int:  # each message once, however many kills found it
        return len({text for kill in run.kills for text in kind(kill)})

    gaps = [abs(gap) for kill in run.kills for gap in kill.sent_before_kill_ms]
    window = f" (Telegram got each within {max(gaps):.0f} ms of the kill)" if gaps else ""
    summary = (
        f"{run.describe()}, {time.monotonic() - run.started:.0f} s\n"
        f"  {len(run.kills)} kills ({phases['running']} while running, {phases['start-up']} in start-up), "
        f"{run.total_sent} messages in {len(CHATS)} chats, {len(telegram.sent_messages())} replies\n"
        f"  lost {replies.lost}, sent twice {replies.expected_repeats} (expected), other problems "
        f"{len(replies.problems) - replies.lost}\n"
        f"  kills between two writes: reply sent, not recorded delivered {caught(lambda k: k.sent_not_done)}{window}; "
        f"reply recorded answered, not sent {caught(lambda k: k.answered_not_sent)}; "
        f"answer stored, not sent {caught(lambda k: k.stored_not_sent)}; user message archived, session not "
        f"saved {caught(lambda k: k.archived_not_in_session)} (message ids repeated in the archive files: "
        f"{raw_archive_repeats(workspace)})\n"
        f"  {files.checked} files checked, torn last lines tolerated: {files.torn_tails or 'none'}"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems[:40])
    return summary


@pytest.fixture
def quiet_fake_servers() -> Iterator[None]:
    """A killed bot leaves the fakes' aiohttp servers writing to closed sockets: expected, not worth a traceback."""
    server_log = logging.getLogger("aiohttp.server")
    level = server_log.level
    server_log.setLevel(logging.CRITICAL)
    yield
    server_log.setLevel(level)


def run_crash_loop(tmp_path: Path, backend: str) -> str:
    seed = int(os.environ.get("BOT_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\ncrash loop: backend {backend}, seed {seed}, {crash_loops(backend)} kills")
    run = CrashRun(backend, seed)
    kills_rng, users_rng, model_rng = (random.Random(f"{seed}-{part}") for part in ("kills", "users", "model"))
    workspace = tmp_path / "workspace"
    log = tmp_path / "bot-stderr.log"
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.set_responder(slow_echo(model_rng))
        users = Users(telegram, run, users_rng)
        users.start()
        try:
            kill_loop(workspace, run, kills_rng, model, telegram, log)
        finally:
            users.stop()
        first_call = len(telegram.calls)
        final = start(workspace, backend, model, telegram, log, "final run")
        try:
            # The drain's quiet window starts once the bot runs: a start slowed by a busy machine (imports,
            # the index) must not pass for a bot that fell quiet with messages unanswered.
            telegram.wait_until(functools.partial(polls_since, telegram, first_call), START_TIMEOUT_SECONDS, "the bot")
            drain(run, telegram)
        finally:
            final.send_signal(signal.SIGTERM)
            code = final.wait(timeout=15)
        assert code == 0, f"{run.describe()}: the final bot exited with {code}; see {log}"
        return check(run, telegram, workspace, log)


@pytest.mark.crash
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.usefixtures("quiet_fake_servers")
def test_sigkill_at_random_moments_loses_nothing_and_answers_once(tmp_path: Path, backend: str) -> None:
    run_crash_loop(tmp_path, backend)


def test_the_file_checks_tolerate_a_torn_last_line_and_nothing_else(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "memory" / "items").mkdir(parents=True)
    (workspace / "memory" / "MEMORY.md").write_text("# Memory\n")
    (workspace / "state").mkdir()
    (workspace / "state" / "turns.jsonl").write_text('{"delivered": "a"}\n{"delivered": "b"}\n{"de')
    report = check_workspace_files(workspace)
    assert (report.problems, report.torn_tails) == ([], ["state/turns.jsonl"])

    (workspace / "state" / "turns.jsonl").write_text('{"delivered": "a"}\n{"de\n{"delivered": "b"}\n')
    (workspace / "memory" / "2026-01-02.md").write_text("[10:00] User: hi | Assistant: hello\n[10:0")
    (workspace / "state" / "model.json").write_text('{"model": "gp')
    report = check_workspace_files(workspace)
    assert any("turns.jsonl line 2 does not parse" in problem for problem in report.problems)
    assert any("model.json does not parse" in problem for problem in report.problems)
    assert report.torn_tails == ["memory/2026-01-02.md"]

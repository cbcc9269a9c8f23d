"""What a message costs as the session grows: a 5,000-message session against a 10-message one.

Two bots (`python -m bot run`, python-telegram-bot backend) run side by side, each in its own process
against its own fake Bot API and instant fake model, with automatic compaction off so the session
keeps every message. Before each starts, its chat's session is written with `--lengths` messages
(alternating user and assistant, about 100 characters each) through the bot's own `SessionService`.
Then rounds of messages, one after another, go to each bot in turn; per round and bot:

- CPU per message (user + system time of the bot's process);
- bytes written per message (`write_bytes` of `/proc/<pid>/io`: what went to the storage layer);
- the median round trip.

The session grows by two messages per message sent; with the default 5 × 20 that is 200 messages, 4%
of the long one. The figures are medians over rounds, and the ratio long / short of each. `--setting`
lexical (default) turns the offline embedder off so that its constant cost per message does not hide
what grows. Not run by CI:

    .venv/bin/python -m bench.session_growth [--lengths 10 5000] [--rounds 5] [--per-round 20] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.minimal_assistant import SETTINGS
from bench.process_meter import ProcessMeter, Round, median_of, sequential_round, warm_up
from bench.telegram_throughput import START_TIMEOUT_SECONDS, start_bot
from bot.domain.message import Message
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.sessions.files import sessions_files

CHAT = 4242
WARM_UP_MESSAGES = 3
FILLER = "the garden shed, the spare keys under the blue pot and the Tuesday delivery"


def seed_messages(count: int) -> list[Message]:
    """`count` alternating user and assistant messages of about 100 characters (5,000 of them are a
    request of about 0.8 MB, under the fake model's 1 MiB limit on a request body)."""
    return [
        Message.user(f"question {n}: what about {FILLER}, item {n % 97}?")
        if n % 2 == 0
        else Message.assistant(f"answer {n}: item {n % 97} is settled, {FILLER}.")
        for n in range(count)
    ]


async def seed_session(workspace: Path, length: int) -> int:
    """Write the chat's session with `length` messages; returns the size of its file."""
    sessions = SessionService(SessionFiles(workspace / "sessions"))
    session = await sessions.get_or_create("telegram", str(CHAT))
    await sessions.append_messages(session, seed_messages(length))
    return sessions_files(sessions).store.path_for(session.id).stat().st_size


def run(arguments: argparse.Namespace) -> dict[str, Any]:
    sections = {**SETTINGS[arguments.setting], "compaction": {"enabled": False}}
    with tempfile.TemporaryDirectory() as folder:
        bots: dict[int, tuple[FakeTelegram, FakeOpenAI, subprocess.Popen[bytes], Path]] = {}
        session_bytes: dict[int, int] = {}
        try:
            for length in arguments.lengths:
                workspace = Path(folder) / f"workspace-{length}"
                session_bytes[length] = asyncio.run(seed_session(workspace, length))
                api, model = FakeTelegram().start(), FakeOpenAI().start()
                bots[length] = (api, model, start_bot("ptb", api, model, workspace, [CHAT], sections), workspace)
            meters = {length: ProcessMeter(process.pid) for length, (_, _, process, _) in bots.items()}
            for length, (api, *_) in bots.items():
                warm_up(api, meters[length], CHAT, WARM_UP_MESSAGES, START_TIMEOUT_SECONDS)
            rounds: dict[int, list[Round]] = {length: [] for length in bots}
            for number in range(arguments.rounds):
                texts = [f"how is the garden today? ({number}.{n})" for n in range(arguments.per_round)]
                for length, (api, *_) in bots.items():
                    rounds[length].append(sequential_round(api, meters[length], CHAT, texts))
            final_bytes = {
                length: (workspace / "sessions" / f"telegram:{CHAT}.json").stat().st_size
                for length, (*_, workspace) in bots.items()
            }
        finally:
            for api, model, process, _ in bots.values():
                process.terminate()
                process.wait(timeout=30)
                api.stop()
                model.stop()
    figures = {length: median_of(measured) for length, measured in rounds.items()}
    short, long = min(figures), max(figures)
    return {
        "setting": arguments.setting,
        "lengths": {
            str(length): {**figures[length], "session_file_bytes": [session_bytes[length], final_bytes[length]]}
            for length in figures
        },
        "cpu_ratio": figures[long]["cpu_ms"] / figures[short]["cpu_ms"],
        "bytes_ratio": figures[long]["bytes_per_message"] / figures[short]["bytes_per_message"],
        "round_trip_ratio": figures[long]["round_trip_ms"] / figures[short]["round_trip_ms"],
        "rounds": arguments.rounds,
        "messages_per_round": arguments.per_round,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lengths", type=int, nargs=2, default=[10, 5_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--setting", default="lexical", choices=list(SETTINGS))
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    arguments = parser.parse_args()
    row = run(arguments)
    print(f"compaction off, memory {arguments.setting}; {arguments.rounds} rounds x {arguments.per_round} messages")
    print(f"{'session':>8} {'CPU/msg':>9} {'written/msg':>12} {'round trip':>11} {'session file':>22}")
    for length, figures in row["lengths"].items():
        before, after = figures["session_file_bytes"]
        print(
            f"{length:>8} {figures['cpu_ms']:>6.1f} ms {figures['bytes_per_message'] / 1024:>8.1f} KiB "
            f"{figures['round_trip_ms']:>8.1f} ms {before / 1024:>9.0f} -> {after / 1024:.0f} KiB"
        )
    print(
        f"long / short: CPU x{row['cpu_ratio']:.2f}, bytes written x{row['bytes_ratio']:.2f}, "
        f"round trip x{row['round_trip_ratio']:.2f}"
    )
    if arguments.json:
        print(json.dumps(row))


if __name__ == "__main__":
    main()

"""Resident memory of the session cache after 10,000 chats with a few messages each.

Each chat gets `--messages` messages through `SessionService.append_messages` (the archive append and
the session rewrite a turn makes, on a temporary disk). The figure is the growth of the process's
resident set over its baseline, measured in a fresh subprocess per case so neither sees the other's
heap: the cache as shipped (the `CACHE_MAX_SESSIONS` most recent chats) and, for reference, a cache
that keeps every chat (as before it was bounded).

Run: `.venv/bin/python -m bench.session_cache [--chats N] [--messages N] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bot.domain.message import Message
from bot.sessions import service as session_service
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles

TEXT = "Could you remind me what we decided about the garden shed, the spare keys and the Tuesday delivery?"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def fill(chats: int, messages: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        sessions = SessionService(SessionFiles(Path(folder) / "sessions"))
        gc.collect()
        baseline = rss_kib()
        started = time.perf_counter()
        for chat in range(chats):
            session = await sessions.get_or_create("telegram", str(chat))
            for number in range(messages // 2):
                await sessions.append_messages(
                    session, [Message.user(f"{TEXT} ({number})"), Message.assistant(f"Here is what we said: {TEXT}")]
                )
        del session
        gc.collect()
        return {
            "growth_mib": (rss_kib() - baseline) / 1024,
            "cached": len(sessions.cached()),
            "seconds": time.perf_counter() - started,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--case", action="store_true", help="measure one case in this process")
    parser.add_argument("--unbounded", action="store_true", help="with --case: keep every chat")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.case:
        if args.unbounded:
            session_service.CACHE_MAX_SESSIONS = sys.maxsize
        print(json.dumps(asyncio.run(fill(args.chats, args.messages))))
        return 0
    figures = {}
    for case, extra in (("bounded", []), ("unbounded", ["--unbounded"])):
        command = [sys.executable, "-m", "bench.session_cache", "--chats", str(args.chats)]
        command += ["--messages", str(args.messages), "--case", *extra]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        figures[case] = json.loads(output.strip().splitlines()[-1])
    bounded, unbounded = figures["bounded"], figures["unbounded"]
    print(
        f"{args.chats} chats x {args.messages} messages: resident memory +{bounded['growth_mib']:.1f} MiB with the"
        f" cache bounded ({bounded['cached']:.0f} sessions kept), +{unbounded['growth_mib']:.1f} MiB keeping every"
        f" chat ({unbounded['cached']:.0f})"
    )
    if args.json:
        print(json.dumps({"bench": "session_cache", "chats": args.chats, **{k: v for k, v in figures.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

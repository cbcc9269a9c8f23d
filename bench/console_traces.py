"""What keeping the console's traces costs a turn: on the workspace's files (`state/traces/`) and on
PostgreSQL's `console_traces` (shared by every replica), against keeping them in memory alone (a deque a
chat, as one process's console could).

A trace as a busy turn leaves it (a dozen plan parts, eight items packed, two tool calls with 2,000-character
results, graph snippets: about 8 kB of JSON) is kept for `--turns` turns spread over `--chats` chats, each
keeping `console.turnsKept` (20). Per turn: what the reply's path pays (the hand-over, `TurnTraces.keep`,
which only starts a task), the store's write that follows it (wall time, median and p99), the CPU it takes
(the whole process's, threads included), and a read of a chat's turns as the "why this reply" page makes
it. PostgreSQL is a throw-away server on 127.0.0.1 (`tests/postgres_server.py`, fsync off as in the tests:
the cost of the statements and the round trips, not of a disk). The files are written as the bot writes
them (`files`: their fsyncs deferred to a round a second), and with an fsync each (`files_fsync`).

Run: `.venv/bin/python -m bench.console_traces [--turns 400] [--chats 20] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import deque
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.pipeline_overhead import percentile
from bot.database.connection import Database
from bot.domain.memory import MemoryItem
from bot.pipeline.trace_files import TraceFiles
from bot.pipeline.trace_records import (
    PackEntry,
    PlanPart,
    TokenUse,
    ToolUse,
    TraceStore,
    TurnTrace,
    trace_to_json,
)
from bot.pipeline.trace_table import TraceTable
from bot.pipeline.traces import TurnTraces
from bot.storage.durability import DeferredSync
from tests.postgres_server import create_database, running_server

KEPT = 20
AT = datetime(2026, 1, 1, tzinfo=UTC)


class TracesInMemory:
    """The baseline: each chat's last `kept` traces in a deque, in this process alone."""

    def __init__(self) -> None:
        self._by_chat: dict[str, deque[TurnTrace]] = {}

    async def add(self, trace: TurnTrace, kept: int) -> None:
        self._by_chat.setdefault(trace.session_id, deque(maxlen=kept)).append(trace)

    async def chats(self) -> list[str]:
        return sorted(self._by_chat)

    async def of(self, session_id: str, kept: int) -> list[TurnTrace]:
        return list(self._by_chat.get(session_id, ()))[-kept:]

    async def recent(self, limit: int) -> list[TurnTrace]:
        every = [trace for chat in self._by_chat.values() for trace in chat]
        return sorted(every, key=lambda trace: trace.at)[-limit:]

    async def forget(self, items: list[MemoryItem]) -> int:
        return 0


def busy_turn(number: int, chats: int) -> TurnTrace:
    words = "the user asked about the garden, the bicycle and the trip to Lisbon; "
    return TurnTrace(
        turn_id=f"turn-{number}",
        session_id=f"telegram:{number % chats}",
        at=AT + timedelta(seconds=number),
        question=f"Question {number}: " + words * 3,
        reply=f"Reply {number}: " + words * 8,
        model="gpt-bench",
        plan=tuple(PlanPart(f"part {n}", f"share {n % 4}", 300 * n, 4000, n == 11) for n in range(12)),
        threshold_tokens=50000,
        packed=tuple(
            PackEntry(
                f"m{number:06d}{n:02d}",
                words * 2,
                "Facts and Preferences",
                0.9 - n / 20,
                {"lexical": 0.5, "vector": 0.3, "recency": 0.1, "salience": 0.1},
            )
            for n in range(8)
        ),
        missed=tuple((f"x{n}", 0.4 - n / 100, "Related Earlier Exchanges") for n in range(5)),
        pack_summary="40 candidates, 8 selected, ~900 tokens, 5 over budget",
        graph=words * 20,
        tools=(
            ToolUse("memory_search", '{"query": "garden"}', ("result " + words * 30)[:2000]),
            ToolUse("web_fetch", '{"url": "https://example.org"}', (words * 40)[:2000]),
        ),
        tokens=(TokenUse("gpt-bench", 12000, 40, 9000), TokenUse("gpt-bench", 13000, 200, 11000)),
        reply_seconds=2.5,
    )


async def figures(store: TraceStore, turns: int, chats: int) -> dict[str, float]:
    traces = TurnTraces(store, lambda: KEPT)
    made = [busy_turn(number, chats) for number in range(turns)]
    handed, written = [], []
    cpu_started = time.process_time()
    wall_started = time.perf_counter()
    for trace in made:
        # A fresh copy each turn, as each turn builds its own.
        trace = replace(trace)
        started = time.perf_counter()
        traces.keep(trace)
        handed.append((time.perf_counter() - started) * 1e6)
        started = time.perf_counter()
        await traces.settle()
        written.append((time.perf_counter() - started) * 1000)
    wall = time.perf_counter() - wall_started
    cpu = time.process_time() - cpu_started
    reads = []
    for number in range(50):
        started = time.perf_counter()
        shown = await traces.of(f"telegram:{number % chats}")
        reads.append((time.perf_counter() - started) * 1000)
        assert len(shown) == min(KEPT, turns // chats)
    return {
        "handover_us": statistics.median(handed),
        "write_ms": statistics.median(written),
        "write_p99_ms": percentile(written, 0.99),
        "cpu_ms_per_turn": cpu * 1000 / turns,
        "turns_per_s": turns / wall,
        "read_chat_ms": statistics.median(reads),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    size = len(json.dumps(trace_to_json(busy_turn(0, 1))))
    results: dict[str, dict[str, float]] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as folder:
        results["memory"] = await figures(TracesInMemory(), arguments.turns, arguments.chats)
        results["files_fsync"] = await figures(TraceFiles(Path(folder) / "own"), arguments.turns, arguments.chats)
        deferred = DeferredSync()
        syncing = asyncio.create_task(deferred.run())
        try:
            results["files"] = await figures(
                TraceFiles(Path(folder) / "traces", deferred), arguments.turns, arguments.chats
            )
        finally:
            syncing.cancel()
            await asyncio.gather(syncing, return_exceptions=True)
            await deferred.sync()
        database = Database(await asyncio.to_thread(create_database, server, "bench_traces"))
        await database.start()
        try:
            results["postgres"] = await figures(TraceTable(database), arguments.turns, arguments.chats)
        finally:
            await database.close()
    if arguments.json:
        print(json.dumps({"trace_bytes": size, **results}))
        return
    print(f"a trace: {size:,} bytes of JSON; {arguments.turns} turns over {arguments.chats} chats, {KEPT} kept a chat")
    print(f"{'':18} " + " ".join(f"{name:>12}" for name in results))
    for key in results["memory"]:
        print(f"{key:18} " + " ".join(f"{figures[key]:12.3f}" for figures in results.values()))


if __name__ == "__main__":
    asyncio.run(main())

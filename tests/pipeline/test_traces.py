"""The console's traces kept in their two stores: the workspace's files (one process, kept across a restart)
and PostgreSQL's `console_traces` (every replica writes, any reads). A trace comes back equal to what was
kept, each chat keeps its newest `turnsKept`, a line or row that is not a trace is skipped (and, in a file,
written back), a forgotten memory item's text is blanked, and a store that fails costs a log line only."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.pipeline.trace_files import TraceFiles
from bot.pipeline.trace_records import (
    FORGOTTEN_TEXT,
    PackEntry,
    PlanPart,
    TokenUse,
    ToolUse,
    TurnTrace,
    trace_from_json,
    trace_to_json,
)
from bot.pipeline.trace_table import TraceTable
from bot.pipeline.traces import TurnTraces
from tests.postgres_server import OpenDatabases

AT = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
CHAT = "telegram:42"
LOCK_CODE = "The bike lock code is 4242."


def trace(number: int, session_id: str = CHAT) -> TurnTrace:
    """A turn with every part of a trace filled, in text no store may lose (accents, a NUL, a lone surrogate)."""
    return TurnTrace(
        turn_id=f"turn-{number}",
        session_id=session_id,
        at=AT + timedelta(seconds=number),
        question=f"Question {number}: what is the bike lock code? Ça va? 🚲",
        reply=f"Reply {number}: it is 4242.\nNUL \x00 and a lone \ud800 surrogate.",
        model="gpt-test",
        plan=(
            PlanPart("persona and instructions", "system", 812, 4000, False),
            PlanPart("history", "rest", 0, 0, True),
        ),
        threshold_tokens=50000,
        packed=(
            PackEntry("m1", LOCK_CODE, "Facts and Preferences", 0.1 + 0.2, {"lexical": 1 / 3, "recency": 0.5}),
            PackEntry("m2", "The user rides to work.", "Facts and Preferences", 0.25, {}),
        ),
        missed=(("m3", 0.123456789012345, "Procedures and Fixes"),),
        pack_summary="3 candidates, 2 selected",
        graph=f"- bike lock: {LOCK_CODE}",
        tools=(ToolUse("memory_search", '{"query": "bike lock"}', f"1. {LOCK_CODE} (m1)"),),
        tokens=(TokenUse("gpt-test", 10000, 10, 6000), TokenUse("gpt-test", 12000, 5, 9000)),
        reply_seconds=1.25,
    )


def forgotten_item() -> MemoryItem:
    return MemoryItem(id="m1", layer=MemoryLayer.SEMANTIC, type="fact", content=LOCK_CODE)


def test_a_trace_comes_back_from_its_json_equal() -> None:
    kept = trace(1)
    assert trace_from_json(json.loads(json.dumps(trace_to_json(kept)))) == kept


@pytest.mark.parametrize(
    "spoilt",
    [
        lambda record: record.pop("plan"),
        lambda record: record.update(thresholdTokens="many"),
        lambda record: record["packed"][0].update(score=True),
        lambda record: record.update(missed=[["m3", 0.5]]),
        lambda record: record.update(at="yesterday"),
    ],
    ids=["a part missing", "text for a number", "a flag for a score", "a short miss", "no time"],
)
def test_an_object_that_is_not_a_trace_is_refused(spoilt: object) -> None:
    record = trace_to_json(trace(1))
    assert callable(spoilt)
    spoilt(record)
    with pytest.raises((KeyError, TypeError, ValueError)):
        trace_from_json(record)


async def test_the_files_keep_the_newest_turns_of_each_chat_across_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "traces"
    files = TraceFiles(folder)
    for number in range(1, 8):
        await files.add(trace(number), 3)
    await files.add(trace(100, "telegram:7"), 3)
    assert await files.of(CHAT, 3) == [trace(5), trace(6), trace(7)]
    # A restart: another process reads the same files.
    again = TraceFiles(folder)
    assert await again.chats() == [CHAT, "telegram:7"]
    assert await again.of(CHAT, 3) == [trace(5), trace(6), trace(7)]
    assert await again.of(CHAT, 2) == [trace(6), trace(7)]
    assert await again.recent(2) == [trace(7), trace(100, "telegram:7")]
    # Appended, and cut back to the newest three once it holds twice as many.
    assert len((folder / f"{CHAT}.jsonl").read_text().splitlines()) < 6


async def test_a_line_that_is_not_a_trace_is_skipped_logged_and_written_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / f"{CHAT}.jsonl"
    good = json.dumps(trace_to_json(trace(1)))
    path.write_text(f'{good}\nnot json at all\n{{"turnId": "half a trace"}}\n')
    files = TraceFiles(folder)
    with caplog.at_level(logging.WARNING):
        assert await files.of(CHAT, 5) == [trace(1)]
    assert "Skipped line 2 of" in caplog.text and "Skipped line 3 of" in caplog.text
    for number in range(2, 5):
        await files.add(trace(number), 2)  # the fourth turn rewrites the file
    lines = path.read_text().splitlines()
    assert lines[:2] == ["not json at all", '{"turnId": "half a trace"}']
    assert await TraceFiles(folder).of(CHAT, 5) == [trace(3), trace(4)]


async def test_a_forgotten_item_is_blanked_in_the_files_and_stays_so(tmp_path: Path) -> None:
    files = TraceFiles(tmp_path)
    await files.add(trace(1), 5)
    await files.add(trace(2, "telegram:7"), 5)
    assert await files.forget([forgotten_item()]) == 2
    for kept in (files, TraceFiles(tmp_path)):
        [shown] = await kept.of(CHAT, 5)
        assert_forgotten(shown)


async def test_a_forgotten_item_leaves_no_older_line_of_a_file(tmp_path: Path) -> None:
    files = TraceFiles(tmp_path)
    await files.add(trace(1), 2)
    for number in (2, 3):  # the two kept turns never packed it
        await files.add(replace(trace(number), packed=(), graph="", tools=()), 2)
    assert LOCK_CODE in (tmp_path / f"{CHAT}.jsonl").read_text()
    assert await files.forget([forgotten_item()]) == 0
    assert LOCK_CODE not in (tmp_path / f"{CHAT}.jsonl").read_text()
    assert [shown.turn_id for shown in await TraceFiles(tmp_path).of(CHAT, 2)] == ["turn-2", "turn-3"]


def assert_forgotten(shown: TurnTrace) -> None:
    forgotten, other = shown.packed
    assert forgotten.forgotten and forgotten.content == "" and forgotten.score == 0.1 + 0.2
    assert other == trace(1).packed[1]
    assert shown.tools[0].result == f"1. {FORGOTTEN_TEXT} (m1)"
    assert shown.graph == f"- bike lock: {FORGOTTEN_TEXT}"
    assert LOCK_CODE not in json.dumps(trace_to_json(shown))


async def test_the_table_is_one_story_for_every_replica(database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    databases = OpenDatabases(database_url)
    try:
        first, second = TraceTable(await databases.open()), TraceTable(await databases.open())
        for number in range(1, 6):
            await (first if number % 2 else second).add(trace(number), 3)
        await second.add(trace(100, "telegram:7"), 3)
        assert await first.of(CHAT, 3) == [trace(3), trace(4), trace(5)]
        assert await second.of(CHAT, 3) == await first.of(CHAT, 3)
        assert await first.chats() == [CHAT, "telegram:7"]
        assert await second.recent(2) == [trace(5), trace(100, "telegram:7")]
        connection = await asyncpg.connect(database_url)
        try:
            assert await connection.fetchval("SELECT count(*) FROM console_traces WHERE session_id = $1", CHAT) == 3
            await connection.execute("INSERT INTO console_traces (session_id, trace) VALUES ($1, 'not a trace')", CHAT)
            with caplog.at_level(logging.WARNING):
                assert await first.of(CHAT, 2) == [trace(5)]
            assert "Skipped trace row" in caplog.text

            assert await second.forget([forgotten_item()]) == 4  # three turns of the chat, one of the other
            assert_forgotten((await first.of(CHAT, 3))[0])
            showing = "SELECT count(*) FROM console_traces WHERE strpos(trace, $1) > 0"
            assert await connection.fetchval(showing, LOCK_CODE) == 0
        finally:
            await connection.close()
    finally:
        await databases.close()


async def test_a_store_that_fails_costs_a_log_line_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "traces"
    blocked.write_text("a file where the folder should be")
    traces = TurnTraces(TraceFiles(blocked), lambda: 5)
    with caplog.at_level(logging.ERROR):
        await traces.forget([forgotten_item()])
        traces.keep(trace(1))  # what `record` does with the trace it built from the turn
        await traces.settle()
    assert "1 forgotten items may still show in the traces" in caplog.text
    assert "The trace of a turn of telegram:42 was not kept" in caplog.text

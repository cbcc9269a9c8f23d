"""What compaction costs and saves, with the fake model on 127.0.0.1.

1. Tokens sent per turn over a 500-turn conversation on a model with an 8,192-token window: the
   provider-counted prompt size of every chat request (min / median / p95 / max, against the limit),
   and the summary's share of it, so one sees the prompt stays bounded instead of growing with the
   conversation. The fake summarizer keeps every stated fact, as a good summary would.
2. The time one compaction takes, outside the model's own latency: sessions of 100, 1,000 and 5,000
   messages compacted with `/compact`-style calls against a summarizer that answers instantly, and the
   durations the 500-turn run recorded in its CompactionEvents.

Run: `.venv/bin/python -m bench.compaction_figures [--turns 500] [--sizes 100 1000 5000] [--json]`
(`--turns 0` skips the conversation; `--json` adds one JSON line of figures per part).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.compaction.events import CompactionEvent
from bot.domain.message import Message
from tests.compaction.helpers import (
    LimitedModel,
    compaction_of,
    is_summary_request,
    provider_tokens,
    say,
)
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, message_text
from tests.fakes.recording_channel import RecordingChannel

MODEL = "bench-8k"
INPUT_TOKENS, OUTPUT_TOKENS = 8192, 1024
TURNS = 500
SIZES = (100, 1_000, 5_000)


def prepare(workspace: Path) -> None:
    preferences = workspace / "preferences"
    preferences.mkdir(parents=True, exist_ok=True)
    models = {"models": {MODEL: {"maxInputTokens": INPUT_TOKENS, "maxOutputTokens": OUTPUT_TOKENS}}}
    (preferences / "models.json").write_text(json.dumps(models))
    config = {"llm": {"model": MODEL}, "memory": {"enabled": False}, "rag": {"enabled": False}}
    (preferences / "runtime-config.json").write_text(json.dumps(config))


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summary_tokens(request: dict[str, Any]) -> int:
    for message in request["messages"]:
        text = message_text(message.get("content"))
        if message["role"] == "system" and text.startswith("[Conversation summary]"):
            return len(text) // 4
    return 0


async def tokens_per_turn(fake: FakeOpenAI, workspace: Path, turns: int = TURNS) -> dict[str, Any]:
    prepare(workspace)
    model = LimitedModel(limit_tokens=INPUT_TOKENS - OUTPUT_TOKENS, answer_chars=400)
    fake.set_responder(model)
    services = Application(env_for(workspace, fake))
    channel = RecordingChannel()
    started = time.perf_counter()
    for turn in range(turns):
        fact = f" FACT-{turn:03d} code word is W{turn}" if turn % 25 == 0 else ""
        await say(services, channel, "1", f"Turn {turn}: tell me about topic {turn}, with some detail.{fact}")
    elapsed = time.perf_counter() - started
    chats = [r for r in fake.chat_requests() if not is_summary_request(r)]
    sizes = [provider_tokens(r) for r in chats]
    shares = [summary_tokens(r) / max(1, provider_tokens(r)) for r in chats if summary_tokens(r)]
    session = await services.sessions.get("test:1")
    assert session is not None
    events = session.metadata.compaction_events
    print(f"{turns} turns on a {INPUT_TOKENS}-token model ({elapsed:.1f}s):")
    print(
        f"  prompt tokens per turn: min {min(sizes)}, median {statistics.median(sizes):.0f}, "
        f"p95 {percentile(sizes, 0.95)}, max {max(sizes)} (limit {INPUT_TOKENS - OUTPUT_TOKENS}); "
        f"over the limit: {len(model.over_limit)}"
    )
    first, last = sizes[:50], sizes[-50:]
    print(
        f"  median of the first 50 turns {statistics.median(first):.0f}, of the last 50 {statistics.median(last):.0f}"
    )
    if shares:
        print(
            f"  summary share of the prompt: median {100 * statistics.median(shares):.0f}%, "
            f"max {100 * max(shares):.0f}%; summary now {len(session.messages[0].content)} chars"
        )
    print(
        f"  compactions: {session.metadata.compaction_count}, summary calls: {model.summary_requests}, "
        f"live messages now: {len(session.messages)}"
    )
    durations = [event.get("durationMs", 0.0) for event in events]
    if durations:
        print(f"  compaction time in the run (last {len(events)}): median {statistics.median(durations):.1f} ms")
    facts = sum(1 for turn in range(0, turns, 25) if f"FACT-{turn:03d}" in session.messages[0].content)
    print(f"  facts still in the summary: {facts} of {len(range(0, turns, 25))}")
    await services.stop()
    return {
        "part": "conversation",
        "turns": turns,
        "seconds": round(elapsed, 2),
        "prompt_tokens_median": statistics.median(sizes),
        "prompt_tokens_max": max(sizes),
        "limit_tokens": INPUT_TOKENS - OUTPUT_TOKENS,
        "over_limit": len(model.over_limit),
        "compactions": session.metadata.compaction_count,
        "compaction_ms_median": statistics.median(durations) if durations else None,
    }


async def compact_once(fake: FakeOpenAI, workspace: Path, size: int) -> tuple[float, CompactionEvent]:
    """Compact a session of `size` messages down to 20; returns the milliseconds it took and its event."""
    prepare(workspace)
    fake.set_responder(LimitedModel(limit_tokens=INPUT_TOKENS))
    services = Application(env_for(workspace, fake))
    session = await services.sessions.get_or_create("test", "1")
    messages: list[Message] = []
    for number in range(size // 2):
        messages += [Message.user(f"question {number} " + "q" * 200), Message.assistant("answer " + "a" * 300)]
    await services.sessions.append_messages(session, messages)
    config = await services.config_store.current()
    started = time.perf_counter()
    event = await compaction_of(services).compact(session, MODEL, config, keep_messages=20)
    elapsed = (time.perf_counter() - started) * 1000
    assert event is not None
    await services.stop()
    return elapsed, event


async def compaction_time(fake: FakeOpenAI, folder: Path, sizes: list[int]) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    if sizes:  # the first compaction of a process pays for imports and the connection: not measured
        await compact_once(fake, folder / "warm-up", 60)
    for size in sizes:
        elapsed, event = await compact_once(fake, folder / f"w{size}", size)
        print(
            f"compact {size:>5} messages: {elapsed:7.1f} ms, {event.summary_calls} summary calls, "
            f"~{event.tokens_before} -> ~{event.tokens_after} tokens"
        )
        figures.append({"part": "compact", "messages": size, "ms": round(elapsed, 1), "calls": event.summary_calls})
    return figures


async def main(turns: int, sizes: list[int], as_json: bool) -> None:
    figures = []
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAI() as fake:
        if turns:
            figures.append(await tokens_per_turn(fake, Path(scratch) / "conversation", turns))
        figures += await compaction_time(fake, Path(scratch), sizes)
    if as_json:
        for part in figures:
            print(json.dumps(part))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=TURNS, help="turns of the conversation (0: skip it)")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="session sizes to compact")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per part")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.turns, arguments.sizes, arguments.json))

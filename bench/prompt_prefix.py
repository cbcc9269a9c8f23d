"""How much of each request to the model is the request before it: what a provider's prompt cache can reuse.

A 50-turn conversation through the real pipeline (memory and RAG on, as shipped; the fake model on
127.0.0.1 answering at once), each message different, with a few facts worth remembering among them.
For each request after the first, the share is the length of the longest prefix it has in common with
the previous request (as JSON, message by message, the way a provider compares prompts), divided by
its own length. Printed: the median and the minimum share, the share at the 10th and 50th turn, and
the share of all the characters sent (after the first request) that were such a prefix: what a
provider's prompt cache could serve of the whole conversation.

Run: `.venv/bin/python -m bench.prompt_prefix [--turns N] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bot.app import Application
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel

TOPICS = (
    "My sister Clara moved to Porto last spring.",
    "Can you suggest a quick dinner with lentils?",
    "I am training for a half marathon in October.",
    "What is a good way to keep basil alive indoors?",
    "Remind me what the capital of Australia is.",
    "I prefer answers in short bullet points.",
    "How do I fix a squeaky door hinge?",
    "My laptop is a ThinkPad X1 running Debian.",
    "What should I pack for a weekend in the Alps?",
    "Explain compound interest in two sentences.",
)


def common_prefix(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> tuple[int, int]:
    """(the characters `current` has in common with `previous` from the start, `current`'s length), as JSON."""
    before = "".join(json.dumps(message, sort_keys=True) for message in previous)
    now = "".join(json.dumps(message, sort_keys=True) for message in current)
    common = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        common += 1
    return common, len(now)


async def conversation(fake: FakeOpenAI, workspace: Path, turns: int) -> list[tuple[int, int]]:
    services = Application(env_for(workspace, fake))
    channel = RecordingChannel()
    try:
        for turn in range(turns):
            text = f"{TOPICS[turn % len(TOPICS)]} (message {turn + 1})"
            before = len(channel.sent["1"])
            await services.router.accept(channel.message("1", text), channel)
            await channel.wait_for("1", before + 1)
            await services.router.dispatcher.drain()
            await services.memory.settle()
    finally:
        await services.stop()
    requests = [request["messages"] for request in fake.chat_requests()]
    return [common_prefix(a, b) for a, b in itertools.pairwise(requests)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, FakeOpenAI() as fake:
        prefixes = asyncio.run(conversation(fake, Path(folder) / "workspace", args.turns))
    shares = [common / max(length, 1) for common, length in prefixes]
    median, lowest = statistics.median(shares), min(shares)
    # What a provider's cache can serve of everything sent: the prefixes over the requests, summed.
    overall = sum(common for common, _ in prefixes) / max(sum(length for _, length in prefixes), 1)
    print(
        f"{args.turns}-turn conversation: each request begins with the one before for a median {median:.1%} of its"
        f" length (lowest {lowest:.1%}; turn 10: {shares[8]:.1%}, turn {args.turns}: {shares[-1]:.1%}); of all"
        f" the characters sent after the first request, {overall:.1%} were a prefix of the request before"
    )
    if args.json:
        row = {"bench": "prompt_prefix", "turns": args.turns, "median": median, "min": lowest, "overall": overall}
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A model whose real window is smaller than the registry says: every turn answered, at most one refusal.

The chat model is `gpt-4o` (128,000 tokens in the registry) behind a fake endpoint whose real window is
6,000 tokens, through the real pipeline (memory on, lexical only; the knowledge graph off). Facts are
told in the first turns, then the user chats with messages of about 270 tokens, and asks for each fact
at the end. Three endpoints: one refuses a longer prompt with OpenAI's `context_length_exceeded` stating
the window (`refuse`), one drops the oldest messages and reports the smaller usage, as Ollama does past
`num_ctx` (`cut`), and one has no window and counts tokens as a real tokenizer varies, chatted with in
messages of very different kinds and sizes: short, long, code, Russian, Chinese (`unlimited`: no window
must be learned). Printed per endpoint: turns answered, prompts refused or cut (and how many of those
came after the bot learned the window), the window learned (none: `-`), the owner notices, the facts in
the prompt the model received when asked for them, the largest prompt, and the seconds the run took;
then what the silent-cut judgement relied on: the residuals (reported / estimated prompt tokens) of the
last whole readings, lowest, median and highest, the largest shortfall of a prompt not judged cut
against its conversation's growth bound, and the slack a cut must fall short by.

Run: `.venv/bin/python -m bench.small_window [--turns N] [--behaviours refuse cut] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import get_args

from tests.context.small_window import WINDOW_TOKENS, Behaviour, run_small_window
from tests.fakes.openai_server import FakeOpenAI


async def measure(behaviour: Behaviour, turns: int) -> dict[str, object]:
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        run = await run_small_window(Path(folder) / "workspace", fake, behaviour, turns)
        seconds = time.perf_counter() - started
    row = dataclasses.asdict(run)
    row["notices"] = len(run.notices)
    return {"behaviour": behaviour, "window_tokens": WINDOW_TOKENS, **row, "seconds": round(seconds, 1)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--behaviours", nargs="+", choices=get_args(Behaviour), default=list(get_args(Behaviour)))
    parser.add_argument("--json", action="store_true", help="one JSON line per endpoint besides the table")
    args = parser.parse_args()
    rows = [await measure(behaviour, args.turns) for behaviour in args.behaviours]
    print(f"{'endpoint':9} {'answered':>10} {'refused':>8} {'cut':>5} {'after':>6} {'learned':>8} {'notices':>8} "
          f"{'facts':>6} {'largest':>8} {'seconds':>8}")  # fmt: skip
    for row in rows:
        print(
            f"{row['behaviour']!s:9} {row['answered']!s:>5}/{row['turns']!s:<4} {row['refusals']!s:>8} "
            f"{row['cuts']!s:>5} {row['refused_or_cut_after_learning']!s:>6} {row['learned_window'] or '-'!s:>8} "
            f"{row['notices']!s:>8} {row['facts_in_prompt']!s:>4}/{row['facts_asked']!s} "
            f"{row['largest_prompt_tokens']!s:>8} {row['seconds']!s:>8}"
        )
    print(f"\n{'endpoint':9} {'readings':>8} {'residual lowest':>15} {'median':>7} {'highest':>8} {'shortfall':>9} "
          f"{'slack':>6}")  # fmt: skip
    for row in rows:
        spread = row["spread"]
        assert isinstance(spread, dict)
        print(
            f"{row['behaviour']!s:9} {spread['readings']:>8} {spread['lowest']:>15.3f} {spread['median']:>7.3f} "
            f"{spread['highest']:>8.3f} {spread['largest_shortfall']:>9} {spread['slack']:>6}"
        )
    if args.json:
        for row in rows:
            print(json.dumps(row))


if __name__ == "__main__":
    asyncio.run(main())

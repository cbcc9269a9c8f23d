"""Are memory's weights fitted to the five LoCoMo dev conversations? Each is held out in turn.

For every weight of retrieval in `GRID`, each value is run over the five
conversations (evidence recall of `bench/locomo.py`, but in process: `MemoryService.build_prompt` per
question, on the items `bench.locomo.write_items` writes, the bundled embedder on, the default
configuration otherwise). Then, for each conversation, the value best on the other four is picked and
scored on it. When the weights generalise, the held-out mean is about the shipped value's mean and the
folds pick the same value; a weight fitted to the dev set shows a held-out mean below the shipped one.

The items of each conversation are embedded once (about 40 s each on 2 cores; the vector cache is kept
in the run's folder for the later values). Not run by CI:

    .venv/bin/python -m bench.locomo_holdout [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import bot.memory.retrieval as retrieval
from bench.locomo import CATEGORIES, DATA, DIA_ID, evidence_ids, write_items
from bot.clock import Clock
from bot.llm.client import LlmClient
from bot.memory.service import MemoryService
from bot.settings import MemoryConfig
from bot.workspace import Workspace

GRID: dict[str, tuple[float, ...]] = {
    "DAY_WEIGHT": (0.2, 0.4, 0.6),
    "NEIGHBOUR_WEIGHT": (0.15, 0.3, 0.45),
    "SPEAKER_WEIGHT": (0.3, 0.6, 0.9),
    "TIME_WEIGHT": (0.15, 0.3, 0.45),
}
# Not here: the pack's size (the budgets), which trades recall for prompt size (a larger pack always
# recalls more), so recall alone would always pick the largest.


async def recall_of(conversation: dict[str, Any], root: Path) -> float:
    """Mean evidence recall of the conversation's questions in the `# Memory` section built for each."""
    workspace = root / conversation["sample_id"]
    if not workspace.exists():
        write_items(conversation, workspace / "memory")
    config = MemoryConfig()
    # The owner asks, in their private chat: the workspace's memory is theirs.
    service = MemoryService(Workspace(workspace), Clock(UTC), cast(LlmClient, None), allowed_users=lambda: [4242])
    service.warm_up(config)
    await asyncio.sleep(0)
    await service.settle()
    scores = []
    for question in conversation["qa"]:
        wanted = evidence_ids(question)
        if question.get("category") not in CATEGORIES or not wanted:
            continue
        prompt = await service.build_prompt(config, "telegram:4242", question["question"])
        scores.append(len(wanted & set(DIA_ID.findall(prompt.text))) / len(wanted))
    await service.close()
    return statistics.mean(scores)


def held_out(table: dict[float, dict[str, float]], shipped: float) -> tuple[float, list[float]]:
    """Each conversation scored with the value best on the others (ties to the shipped value): the mean, the picks."""
    conversations = sorted(table[shipped])
    picks = []
    for held in conversations:
        others = [c for c in conversations if c != held]
        picks.append(max(table, key=lambda value: (statistics.mean(table[value][c] for c in others), value == shipped)))
    return statistics.mean(table[pick][c] for pick, c in zip(picks, conversations, strict=True)), picks


async def run() -> list[dict[str, Any]]:
    conversations = json.loads(DATA.read_text())
    figures = []
    with tempfile.TemporaryDirectory(prefix="locomo-holdout-") as folder:
        for name, values in GRID.items():
            shipped = float(getattr(retrieval, name))
            table: dict[float, dict[str, float]] = {}
            for value in sorted({*values, shipped}):
                setattr(retrieval, name, value)
                try:
                    table[value] = {c["sample_id"]: await recall_of(c, Path(folder)) for c in conversations}
                finally:
                    setattr(retrieval, name, shipped)
            mean, picks = held_out(table, shipped)
            by_value = {value: statistics.mean(by.values()) for value, by in table.items()}
            figures.append(
                {
                    "weight": name,
                    "shipped": shipped,
                    "mean_by_value": {value: round(score, 4) for value, score in by_value.items()},
                    "picked_per_fold": picks,
                    "held_out_mean": round(mean, 4),
                }
            )
            print(
                f"{name}: shipped {shipped:g} mean {by_value[shipped]:.3f}; "
                f"held out {mean:.3f} (picked {', '.join(f'{p:g}' for p in picks)}); "
                + ", ".join(f"{value:g}: {score:.3f}" for value, score in by_value.items()),
                flush=True,
            )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    arguments = parser.parse_args()
    figures = asyncio.run(run())
    if arguments.json:
        print(json.dumps({"bench": "locomo_holdout", "weights": figures}))


if __name__ == "__main__":
    main()

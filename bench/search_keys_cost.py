"""What memory's search keys cost when an item is written: CPU per item indexed, with and without them.

Every turn of the five LoCoMo dev conversations (3,122 items, as `bench.locomo` writes them) is indexed
by `Bm25Index`, one item at a time as a turn's item is, then all at once as a start-up read is; once
with the search keys (the places' regions, the relative dates' dates) and once without. The keys are
made by rules, so no model call is added; the table of places is read once, on first use (timed apart).

    .venv/bin/python -m bench.search_keys_cost [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import bot.memory.lexical_index as lexical_index
from bench.locomo import DATA, write_items
from bot.domain.memory import MemoryItem
from bot.memory.search_keys import places, search_keys


def locomo_items() -> list[MemoryItem]:
    items: list[MemoryItem] = []
    with tempfile.TemporaryDirectory() as folder:
        for conversation in json.loads(DATA.read_text()):
            memory = Path(folder) / conversation["sample_id"]
            write_items(conversation, memory)
            for path in sorted((memory / "items" / "episodic").glob("*.jsonl")):
                items += [MemoryItem.model_validate_json(line) for line in path.read_text().splitlines()]
    return items


def cpu_ms_per_item(items: list[MemoryItem], one_by_one: bool) -> float:
    index = lexical_index.Bm25Index()
    started = time.process_time()
    if one_by_one:
        for item in items:
            index.add(item)
    else:
        index.add_many(items)
    return (time.process_time() - started) * 1000 / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    items = locomo_items()
    started = time.process_time()
    places()
    table_ms = (time.process_time() - started) * 1000
    figures: dict[str, float] = {"table_load_ms": round(table_ms, 1)}
    # The index's own reference to the keys function, swapped for one that makes none.
    hook = "search_keys"
    for name, keys in (("with_keys", search_keys), ("without_keys", lambda item: "")):
        setattr(lexical_index, hook, keys)
        for mode, one_by_one in (("one_by_one", True), ("batch", False)):
            runs = [cpu_ms_per_item(items, one_by_one) for _ in range(arguments.rounds)]
            figures[f"{name}_{mode}_ms"] = round(statistics.median(runs), 4)
    setattr(lexical_index, hook, search_keys)
    keyed = sum(1 for item in items if search_keys(item))
    print(f"{len(items)} LoCoMo items, {keyed} with search keys; table of places read once in {table_ms:.0f} ms of CPU")
    for mode in ("one_by_one", "batch"):
        print(
            f"  indexed {mode.replace('_', ' ')}: {figures[f'with_keys_{mode}_ms']:.3f} ms of CPU an item with keys, "
            f"{figures[f'without_keys_{mode}_ms']:.3f} ms without; no model call"
        )
    if arguments.json:
        print(json.dumps({"bench": "search_keys_cost", "items": len(items), "keyed": keyed, **figures}))


if __name__ == "__main__":
    main()

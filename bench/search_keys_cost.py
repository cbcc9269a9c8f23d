"""What memory's search keys cost when an item is written: CPU per item indexed, with and without them.

Every turn of the five LoCoMo dev conversations (3,122 items, as `bench.locomo` writes them) is indexed
by `Bm25Index`, one item at a time as a turn's item is, then all at once as a start-up read is; once
with the search keys (the places' regions, the relative dates' dates) and once without. The keys are
made by rules, so no model call is added; the table of places is read once, on first use (timed apart).

Then the write of an exchange with `memory.llmExtractionEnabled`, whose extraction reply also gives the
exchange its keys: every turn is the user's side of an exchange, and the model's reply to its extraction
call holds LoCoMo's own observations of that turn (facts a model wrote, one sentence each) as its items.
Timed per exchange: reading the reply (`parse_reply`), the write of the exchange and its facts
(`MemoryWriteService.record_turn` on a real item store with the lexical index) and the append to the
files; once with the exchange's keys stored and indexed, once without (the exchange alone, as with
extraction on but no keys kept). The model calls are counted, not made: one extraction call an exchange
either way (`LlmMemoryExtractor`), the keys coming in its reply.

    .venv/bin/python -m bench.search_keys_cost [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import bot.memory.lexical_index as lexical_index
from bench.locomo import DATA, EVIDENCE_PART, session_time, write_items
from bot.domain.memory import MemoryItem, TurnMemoryEvent
from bot.memory.extraction import RuleBasedExtractor
from bot.memory.items_store import MemoryItemStore
from bot.memory.llm_extraction import parse_reply
from bot.memory.search_keys import places, search_keys
from bot.memory.write_service import MemoryWriteService
from bot.settings import MemoryConfig
from bot.workspace import MemoryPaths


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


def observations(conversation: dict[str, Any]) -> dict[str, list[str]]:
    """LoCoMo's observations of a conversation (facts a model wrote from it, each naming the turns it came
    from) by the dia_id of each of those turns."""
    observed: dict[str, list[str]] = {}
    for facts in conversation["observation"].values():
        for sentences in facts.values():
            for sentence, where in sentences:
                for session, turn in EVIDENCE_PART.findall(str(where)):
                    observed.setdefault(f"D{session}:{turn}", []).append(sentence)
    return observed


def observed_exchanges() -> list[tuple[TurnMemoryEvent, str]]:
    """Each LoCoMo turn as an exchange, with the extraction reply a model gives it: LoCoMo's observations of
    that turn as facts (`{"items": []}` for a turn with none)."""
    exchanges: list[tuple[TurnMemoryEvent, str]] = []
    for conversation in json.loads(DATA.read_text()):
        observed = observations(conversation)
        dialog = conversation["conversation"]
        for key in sorted((k for k in dialog if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])):
            when = session_time(dialog[f"{key}_date_time"])
            for turn in dialog[key]:
                facts = observed.get(turn["dia_id"], [])[:10]
                reply = {"items": [_fact(sentence) for sentence in facts]}
                said = f"{turn['speaker']}: {turn['text']}"
                event = TurnMemoryEvent("bench:1", said, "Noted.", when, f"u-{turn['dia_id']}", f"a-{turn['dia_id']}")
                exchanges.append((event, json.dumps(reply)))
    return exchanges


def _fact(sentence: str) -> dict[str, Any]:
    return {"layer": "SEMANTIC", "type": "fact", "content": sentence[:400], "key": None, "confidence": 0.8}


async def write_cpu_ms(exchanges: list[tuple[TurnMemoryEvent, str]], mode: str) -> tuple[float, int]:
    """CPU per exchange of reading its extraction reply and writing it with its facts (`mode` "rules": extraction
    off, the rules' facts instead); and how many keys the exchanges got."""
    config = MemoryConfig(llm_extraction_enabled=mode != "rules")
    rules = RuleBasedExtractor()
    keys = 0
    with tempfile.TemporaryDirectory() as folder:
        store = MemoryItemStore(MemoryPaths(Path(folder)), UTC)
        store.subscribe(lexical_index.Bm25Index())
        writer = MemoryWriteService(store)
        started = time.process_time()
        for event, reply in exchanges:
            exchange_keys: tuple[str, ...] = ()
            if mode == "rules":
                candidates = rules.extract(event, code_aware=True)
            else:
                extraction = parse_reply(reply)
                candidates = extraction.candidates
                if mode == "model_keys":
                    exchange_keys = extraction.search_keys
            keys += len(exchange_keys)
            writer.record_turn(event, candidates, config, exchange_keys)
            await store.flush(durable=False)
        elapsed = time.process_time() - started
        store.close()
    return elapsed * 1000 / len(exchanges), keys


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
    exchanges = observed_exchanges()
    with_facts = sum(1 for _, reply in exchanges if '"content"' in reply)
    keys_stored = 0
    for mode in ("model_keys", "no_model_keys", "rules"):
        runs = []
        for _ in range(arguments.rounds):
            cpu_ms, made = asyncio.run(write_cpu_ms(exchanges, mode))
            runs.append(cpu_ms)
            keys_stored = max(keys_stored, made)
        figures[f"write_{mode}_ms"] = round(statistics.median(runs), 4)
    print(
        f"{len(exchanges)} exchanges written with llmExtractionEnabled, {with_facts} with facts from their extraction "
        f"reply ({keys_stored} keys in all): {figures['write_model_keys_ms']:.3f} ms of CPU an exchange with the "
        f"model's keys, {figures['write_no_model_keys_ms']:.3f} ms without; the keys come in the reply to the "
        "extraction call: no model call is added"
    )
    print(f"  extraction off (the rules, no model call): {figures['write_rules_ms']:.3f} ms of CPU an exchange")
    if arguments.json:
        print(json.dumps({"bench": "search_keys_cost", "items": len(items), "keyed": keyed, **figures}))


if __name__ == "__main__":
    main()

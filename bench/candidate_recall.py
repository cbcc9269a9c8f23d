"""Where memory's missed evidence is: candidate recall by depth, and what the misses share with the hits.

In process, on the items `bench.locomo` writes (one EPISODIC item per dialog turn), the bundled embedder on
and the default configuration otherwise, the owner asking in their private chat: for each question of
categories 1-4, the evidence's recall among the first 20 / 40 / 80 / 160 candidates retrieval ranks
(`MemoryService.explain`), and in the `# Memory` section the pack builds (`MemoryService.build_prompt`,
with its size in characters: the system messages are this plus about 1,500 characters of instructions).

Each piece of evidence missing from the first 40 is put in the first of these that holds: the turn next
to one of the first 10 candidates (±1), within 2-3 turns of one, in the same session as one, sharing a
rare word (in at most 1 % of the turns, not in the question) with one, or none of these.

The items of each conversation are embedded once (about 40 s each on 2 cores); `--root` keeps them, and
their vectors, for the next run. Not run by CI:

    .venv/bin/python -m bench.candidate_recall [--only conv-44,conv-47] [--data FILE] [--root DIR] [--json]
        [--set NAME=VALUE ...]   (a constant of `bot.memory.retrieval` or `bot.memory.prompt_pack`)
        [--depths 20,40,80,160]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
from collections import Counter, defaultdict
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import bot.memory.prompt_pack as prompt_pack
import bot.memory.retrieval as retrieval
from bench.locomo import CATEGORIES, DATA, DIA_ID, OWNER, evidence_ids, write_items
from bot.clock import Clock
from bot.llm.client import LlmClient
from bot.memory.lexical_index import tokenize
from bot.memory.service import MemoryService
from bot.settings import MemoryConfig
from bot.workspace import Workspace

DEPTHS = (20, 40, 80, 160)
STRONG = 10
MISS_DEPTH = 40
RARE_SHARE = 0.01
PLACES = ("next turn", "2-3 turns", "same session", "rare word", "elsewhere")
_ITEM_ID = re.compile(r"locomo-D(\d+)-(\d+)")


def dia_id_of(item_id: str) -> tuple[int, int] | None:
    found = _ITEM_ID.fullmatch(item_id)
    return (int(found[1]), int(found[2])) if found else None


def turns_of(conversation: dict[str, Any]) -> dict[tuple[int, int], str]:
    """Each turn's text by (session, turn)."""
    found: dict[tuple[int, int], str] = {}
    for key, turns in conversation["conversation"].items():
        if re.fullmatch(r"session_\d+", key):
            for turn in turns:
                session, number = (int(part) for part in turn["dia_id"].removeprefix("D").split(":"))
                found[(session, number)] = turn["text"] + " " + turn.get("blip_caption", "")
    return found


def where_missed(
    missed: tuple[int, int], strong: list[tuple[int, int]], words: dict[tuple[int, int], set[str]], asked: set[str]
) -> str:
    """The first of `PLACES` that holds for a missed turn against the strong candidates."""
    gaps = [abs(missed[1] - hit[1]) for hit in strong if hit[0] == missed[0]]
    if any(gap == 1 for gap in gaps):
        return PLACES[0]
    if any(gap <= 3 for gap in gaps):
        return PLACES[1]
    if gaps:
        return PLACES[2]
    own = words.get(missed, set()) - asked
    if any(own & words.get(hit, set()) for hit in strong):
        return PLACES[3]
    return PLACES[4]


async def measure(conversation: dict[str, Any], root: Path, depths: tuple[int, ...]) -> dict[str, Any]:
    workspace = root / conversation["sample_id"]
    if not workspace.exists():
        write_items(conversation, workspace / "memory")
    turns = turns_of(conversation)
    document_frequency = Counter(term for text in turns.values() for term in set(tokenize(text)))
    rare_limit = max(2, int(RARE_SHARE * len(turns)))
    words = {
        key: {term for term in tokenize(text) if document_frequency[term] <= rare_limit} for key, text in turns.items()
    }
    config = MemoryConfig()
    service = MemoryService(Workspace(workspace), Clock(UTC), cast(LlmClient, None), allowed_users=lambda: [OWNER])
    service.warm_up(config)
    await asyncio.sleep(0)
    await service.settle()
    session = f"telegram:{OWNER}"
    rows = []
    for question in conversation["qa"]:
        wanted = evidence_ids(question)
        if question.get("category") not in CATEGORIES or not wanted:
            continue
        explained = await service.explain(config, session, question["question"], max(depths))
        ranked = [dia for item, _ in explained if (dia := dia_id_of(item.id)) is not None]
        wanted_keys = {cast(tuple[int, int], dia_id_of("locomo-" + w.replace(":", "-"))) for w in wanted}
        prompt = await service.build_prompt(config, session, question["question"])
        shown = set(DIA_ID.findall(prompt.text))
        asked = set(tokenize(question["question"]))
        strong = ranked[:STRONG]
        misses = [where_missed(key, strong, words, asked) for key in wanted_keys if key not in ranked[:MISS_DEPTH]]
        rows.append(
            {
                "category": CATEGORIES[question["category"]],
                "at": {depth: len(wanted_keys & set(ranked[:depth])) / len(wanted_keys) for depth in depths},
                "pack": len(wanted & shown) / len(wanted),
                "chars": len(prompt.text),
                "misses": misses,
            }
        )
    await service.close()
    return {"sample": conversation["sample_id"], "rows": rows}


def report(results: list[dict[str, Any]], depths: tuple[int, ...]) -> dict[str, Any]:
    rows = [row for result in results for row in result["rows"]]
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    figures: dict[str, Any] = {"questions": len(rows), "categories": {}}
    print(f"{'':<12} {'n':>4} " + " ".join(f"@{d:<5}" for d in depths) + "  pack   misses@40: " + ", ".join(PLACES))
    for name, group in [("all", rows), *sorted(by_category.items())]:
        at = {depth: statistics.mean(row["at"][depth] for row in group) for depth in depths}
        pack = statistics.mean(row["pack"] for row in group)
        places = Counter(place for row in group for place in row["misses"])
        print(
            f"{name:<12} {len(group):>4} "
            + " ".join(f"{at[d]:.3f} " for d in depths)
            + f" {pack:.3f}  "
            + ", ".join(str(places[p]) for p in PLACES)
        )
        figures["categories"][name] = {"at": at, "pack": pack, "misses": {p: places[p] for p in PLACES}}
    for result in results:
        chars = [row["chars"] for row in result["rows"]]
        pack = statistics.mean(row["pack"] for row in result["rows"])
        print(f"{result['sample']}: pack {pack:.3f}, # Memory p50 {statistics.median(chars):.0f} chars")
        figures[result["sample"]] = {"pack": pack, "memory_chars_p50": statistics.median(chars)}
    chars = [row["chars"] for row in rows]
    figures["memory_chars_p50"] = statistics.median(chars)
    print(f"# Memory p50 {statistics.median(chars):.0f} chars, mean {statistics.mean(chars):.0f}")
    return figures


async def run(conversations: list[dict[str, Any]], root: Path, depths: tuple[int, ...]) -> list[dict[str, Any]]:
    return [await measure(conversation, root, depths) for conversation in conversations]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="only these conversations (sample ids, comma-separated)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--root", type=Path, default=None, help="keep the workspaces (and vectors) here")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a weight of retrieval or the pack, for a try"
    )
    parser.add_argument("--depths", default=",".join(map(str, DEPTHS)), help="the depths recall is measured at")
    arguments = parser.parse_args()
    depths = tuple(sorted(int(depth) for depth in arguments.depths.split(",")))
    for setting in arguments.set:
        name, value = setting.split("=")
        module = retrieval if hasattr(retrieval, name) else prompt_pack
        setattr(module, name, type(getattr(module, name))(float(value)))
    conversations = json.loads(arguments.data.read_text())
    if arguments.only:
        conversations = [c for c in conversations if c["sample_id"] in arguments.only.split(",")]
    if arguments.root is not None:
        arguments.root.mkdir(parents=True, exist_ok=True)
        results = asyncio.run(run(conversations, arguments.root, depths))
    else:
        with tempfile.TemporaryDirectory(prefix="candidate-recall-") as folder:
            results = asyncio.run(run(conversations, Path(folder), depths))
    figures = report(results, depths)
    if arguments.json:
        print(json.dumps({"bench": "candidate_recall", **figures}))


if __name__ == "__main__":
    main()

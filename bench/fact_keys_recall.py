"""What the model's facts as search keys bring to memory recall: LoCoMo with and without them, in process.

The items `bench.locomo` writes (one EPISODIC item per dialog turn), once as they are and once each with
LoCoMo's own observations of that turn as its `searchKeys` (facts a model wrote from the conversation, as
`memory.llmExtractionEnabled` makes them at write time). For each question of categories 1-4, the
`# Memory` section the pack builds for the owner's private chat (`MemoryService.build_prompt`, the default
configuration) is read for the question's evidence, as `bench.locomo` reads the system messages: R_frac
overall and per category, and the section's median size in characters.

LoCoMo's observations were written with the whole conversation in view, so they are better facts than an
extraction call that sees one exchange writes: read the gain as an upper bound. Lexical only by default
(seconds); `--hybrid` adds the bundled embedder (about 40 s a conversation to embed on 2 cores, once: the
keyed workspace reuses the plain one's vectors, its items' words being the same). Not run by CI:

    .venv/bin/python -m bench.fact_keys_recall [--only conv-44,conv-47] [--hybrid] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
from collections import defaultdict
from datetime import UTC
from pathlib import Path
from typing import Any, cast

from bench.locomo import CATEGORIES, DATA, DIA_ID, OWNER, evidence_ids, write_items
from bench.search_keys_cost import observations
from bot.clock import Clock
from bot.llm.client import LlmClient
from bot.memory.service import MemoryService
from bot.settings import MemoryConfig
from bot.workspace import Workspace

VARIANTS = ("plain", "fact keys")


def add_fact_keys(conversation: dict[str, Any], memory: Path) -> int:
    """Give each turn's item its observations as `searchKeys`; returns how many items got some."""
    observed = observations(conversation)
    keyed = 0
    for path in sorted((memory / "items" / "episodic").glob("*.jsonl")):
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            facts = observed.get(item["content"][1:].split("]", 1)[0], [])
            if facts:
                item["searchKeys"] = facts
                keyed += 1
            lines.append(json.dumps(item, ensure_ascii=False))
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return keyed


async def recall(conversation: dict[str, Any], workspace: Path, config: MemoryConfig) -> list[dict[str, Any]]:
    service = MemoryService(Workspace(workspace), Clock(UTC), cast(LlmClient, None), allowed_users=lambda: [OWNER])
    service.warm_up(config)
    await asyncio.sleep(0)
    await service.settle()
    rows = []
    for question in conversation["qa"]:
        wanted = evidence_ids(question)
        if question.get("category") not in CATEGORIES or not wanted:
            continue
        prompt = await service.build_prompt(config, f"telegram:{OWNER}", question["question"])
        shown = set(DIA_ID.findall(prompt.text))
        rows.append(
            {
                "category": CATEGORIES[question["category"]],
                "found": len(wanted & shown) / len(wanted),
                "chars": len(prompt.text),
            }
        )
    await service.close()
    return rows


async def measure(conversation: dict[str, Any], root: Path, config: MemoryConfig) -> dict[str, list[dict[str, Any]]]:
    plain = root / conversation["sample_id"] / "plain"
    write_items(conversation, plain / "memory")
    results = {"plain": await recall(conversation, plain, config)}
    keyed = root / conversation["sample_id"] / "keyed"
    # The same items, with the vectors the plain run made (`memory/index/vectors.sqlite3`, by the items' words).
    shutil.copytree(plain, keyed)
    (keyed / "memory" / "index" / "items.sqlite3").unlink(missing_ok=True)
    add_fact_keys(conversation, keyed / "memory")
    results["fact keys"] = await recall(conversation, keyed, config)
    return results


def report(results: list[dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    print(f"{'':<12} {'n':>4}  " + "  ".join(f"{variant:>10}" for variant in VARIANTS))
    rows = {variant: [row for result in results for row in result[variant]] for variant in VARIANTS}
    groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for variant in VARIANTS:
        for row in rows[variant]:
            groups["all"][variant].append(row["found"])
            groups[row["category"]][variant].append(row["found"])
    for name in ["all", *sorted(set(groups) - {"all"})]:
        means = {variant: statistics.mean(groups[name][variant]) for variant in VARIANTS}
        print(f"{name:<12} {len(groups[name]['plain']):>4}  " + "  ".join(f"{means[v]:>10.3f}" for v in VARIANTS))
        figures[name] = means
    chars = {variant: statistics.median(row["chars"] for row in rows[variant]) for variant in VARIANTS}
    print("# Memory p50 chars  " + "  ".join(f"{chars[v]:>10.0f}" for v in VARIANTS))
    figures["memory_chars_p50"] = chars
    return figures


async def run(conversations: list[dict[str, Any]], config: MemoryConfig) -> list[dict[str, list[dict[str, Any]]]]:
    with tempfile.TemporaryDirectory(prefix="fact-keys-") as folder:
        return [await measure(conversation, Path(folder), config) for conversation in conversations]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="only these conversations (sample ids, comma-separated)")
    parser.add_argument("--hybrid", action="store_true", help="with the bundled embedder (lexical only otherwise)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    arguments = parser.parse_args()
    conversations = json.loads(DATA.read_text())
    if arguments.only:
        conversations = [c for c in conversations if c["sample_id"] in arguments.only.split(",")]
    config = MemoryConfig() if arguments.hybrid else MemoryConfig(embeddings_model=None)
    figures = report(asyncio.run(run(conversations, config)))
    if arguments.json:
        print(json.dumps({"bench": "fact_keys_recall", "hybrid": arguments.hybrid, **figures}))


if __name__ == "__main__":
    main()

"""Whether this checkout ranks as another one does: every candidate's id, place and score, and the pack.

On a folder of `bench.memory_retrieval --prepare` (then `--cold`), each checkout, in its own process, scores
the same messages (with their vectors made by the bundled embedder) and writes every candidate of each
(`RetrievalResult.ranked`: id, layer, score, section, relevance, recency, salience, confidence, updated) and
the ids and the text of its pack; the two are then compared. Both processes run with `PYTHONHASHSEED=0`, so that a
checkout whose BM25 sums its terms' float32 scores in the order of a set of strings (which string hashing
changes from process to process, and with it the last bits of some relevances) is compared at one order.

Run: `.venv/bin/python -m bench.ranking_against OTHER_CHECKOUT FOLDER [messages]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.memory_retrieval import NOW, sentence, start
from bot.domain.memory import LiveConversation, MemoryQuery
from bot.memory.prompt_pack import offered_order
from bot.settings import MemoryConfig

# Messages the random sentences do not make: a name, a time the message names.
EXTRA = ("What did Docker say about nginx last May?", "Which garden tomatoes did we water yesterday?")


async def dump(folder: Path, messages: int, out: Path) -> None:
    """Write the ranking and the pack of each message, one JSON line each (this checkout's code)."""
    config = MemoryConfig()
    service, _, _ = await start(folder, config)
    scope = await service.scope(config, "telegram:1")
    embedder = service.embedder(config)
    assert embedder is not None
    rng = random.Random(7)
    texts = [sentence(rng, 12) for _ in range(messages)] + list(EXTRA)
    pack = service._prompts._pack  # the pack as the bot builds it
    with out.open("w") as lines:
        for text in texts:
            vector = await service._prompts.query_vector(scope, embedder, text)
            query = MemoryQuery(text=text, session_id="telegram:1", now=NOW, live=LiveConversation())
            result = scope.retrieval.retrieve(query, vector)
            built = pack.build(
                offered_order(result.ranked, query),
                scope.store.get_many,
                result.candidates,
                query.soft_budget_tokens,
                query.max_budget_tokens,
            )
            ranked = [list(entry) for entry in result.ranked]
            lines.write(json.dumps({"text": text, "candidates": result.candidates, "ranked": ranked}) + "\n")
            lines.write(json.dumps([[scored.item.id for scored in built.items], built.rendered]) + "\n")
    await service.close()


def compare(mine: Path, theirs: Path) -> dict[str, int]:
    """How many messages differ in the order of their candidates, in a score, in another part, in the pack (its
    items or its text)."""
    figures = dict.fromkeys(("messages", "order", "scores", "parts", "packs", "candidates"), 0)
    ours, others = mine.read_text().splitlines(), theirs.read_text().splitlines()
    for number in range(0, len(ours), 2):
        one, other = json.loads(ours[number]), json.loads(others[number])
        figures["messages"] += 1
        figures["candidates"] += one["candidates"] != other["candidates"]
        if [entry[0] for entry in one["ranked"]] != [entry[0] for entry in other["ranked"]]:
            figures["order"] += 1
        elif [entry[2] for entry in one["ranked"]] != [entry[2] for entry in other["ranked"]]:
            figures["scores"] += 1
        elif one["ranked"] != other["ranked"]:
            figures["parts"] += 1
        figures["packs"] += ours[number + 1] != others[number + 1]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="the other checkout (its bot/ and bench/ are used)")
    parser.add_argument("folder", type=Path, help="a folder made by bench.memory_retrieval --prepare and --cold")
    parser.add_argument("messages", type=int, nargs="?", default=200, help="random messages (default 200)")
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # one side, in its own process
    arguments = parser.parse_args()
    if arguments.dump:
        asyncio.run(dump(arguments.folder, arguments.messages, arguments.dump))
        return
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as directory:
        outs: list[Path] = []
        for checkout in (here, arguments.other.resolve()):
            out = Path(directory) / f"{len(outs)}.jsonl"
            # This file run as a script, with the checkout's bot and bench first on the path.
            environment = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(checkout)}
            command = [sys.executable, __file__, str(checkout), str(arguments.folder), str(arguments.messages)]
            subprocess.run([*command, "--dump", str(out)], check=True, cwd=checkout, env=environment)
            outs.append(out)
        figures = compare(*outs)
    print(
        f"{figures['messages']} messages: the order of the candidates differs in {figures['order']}, a score in "
        f"{figures['scores']}, another part of a candidate in {figures['parts']}, the number of candidates in "
        f"{figures['candidates']}, the pack (its items or its text) in {figures['packs']}"
    )


if __name__ == "__main__":
    main()

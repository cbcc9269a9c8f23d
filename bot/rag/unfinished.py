"""The documents LightRAG did not finish, cleared so that the journal's next try indexes them anew.

LightRAG keeps a document it could not finish in its document status: `failed` when its extraction failed
(the model refused or was out of reach), `pending` or `processing` when the process stopped before the end.
It never takes such a document up again on its own terms: an insert of the same id is refused as a
duplicate, and the old status stands, so a batch that failed once would fail at every try. The journal
(`RagStore`) is what says which exchanges still wait to be indexed, so such documents are deleted and their
text goes in again with the journal's next try:

- at an insert, the documents of that insert LightRAG holds as failed;
- when a file-storage workspace is opened, every document not processed: this process is the only one
  that writes those files, so any such document was left by an earlier stop (with PostgreSQL storages,
  another replica may be indexing it just now).

LightRAG deletes a document's graph objects through its recovery anchors, the lists of what each document
added to the graph. Its file storages write them when a batch ends, so a stop in the middle of a
document's merge leaves a document it refuses to delete ("recovery anchor row(s) missing") for fear of
leaving graph objects no document owns. Its own audit (`audit_kg_integrity(apply=True)`) rebuilds the
anchors from the graph; it reads the whole graph, so it runs only when such a document is found.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

NOT_PROCESSED = ("pending", "parsing", "analyzing", "processing", "failed")
# `kg_write_state` of a document whose merge into the graph began (LightRAG's constant of that name).
GRAPH_MUTATION_STARTED = "graph_mutation_started"


async def clear_failed(rag: Any, workspace: str, doc_ids: list[str]) -> None:
    """Delete those of `doc_ids` LightRAG holds as failed, so that they are indexed anew."""
    with _logged_on_failure(workspace):
        await _clear_failed(rag, workspace, doc_ids)


async def clear_left_by_a_stop(rag: Any, workspace: str) -> None:
    """Delete every document of the workspace LightRAG has not processed: with file storages, an earlier stop
    left them (the journal still holds their text as queued)."""
    with _logged_on_failure(workspace):
        await _clear_left_by_a_stop(rag, workspace)


@contextlib.contextmanager
def _logged_on_failure(workspace: str) -> Iterator[None]:
    # What cannot be cleared stays as it is: the insert goes on, and LightRAG refuses a failed id again, so the
    # journal tries it later. The graph itself is still readable.
    try:
        yield
    except Exception as error:
        log.warning("[RAG] Could not clear LightRAG's unfinished documents of %s: %s: %s", workspace,
                    type(error).__name__, error)  # fmt: skip


async def _clear_failed(rag: Any, workspace: str, doc_ids: list[str]) -> None:
    # The storage's own read: LightRAG's `aget_docs_by_ids` logs a warning for each id it does not hold yet.
    held = await rag.doc_status.get_by_ids(doc_ids)
    failed = {
        doc_id: status for doc_id, status in zip(doc_ids, held, strict=True) if status and status_of(status) == "failed"
    }
    for doc_id, status in failed.items():
        log.info(
            "[RAG] LightRAG failed %s in %s before (%s); deleting it to index it again",
            doc_id, workspace, status_fields(status).get("error_msg") or "no reason given",
        )  # fmt: skip
    await _delete(rag, workspace, failed)


async def _clear_left_by_a_stop(rag: Any, workspace: str) -> None:
    statuses = importlib.import_module("lightrag.base").DocStatus
    left = await rag.doc_status.get_docs_by_statuses([statuses(name) for name in NOT_PROCESSED])
    if left:
        log.info(
            "[RAG] %d documents of %s were left unfinished by the last stop; deleting them to index them again",
            len(left), workspace,
        )  # fmt: skip
    await _delete(rag, workspace, left)


async def _delete(rag: Any, workspace: str, documents: dict[str, Any]) -> None:
    if not documents:
        return
    if await _anchors_missing(rag, documents):
        await _rebuild_anchors(rag, workspace)
    for doc_id in documents:
        result = await rag.adelete_by_doc_id(doc_id, delete_llm_cache=True)
        if result.status not in ("success", "not_found"):
            log.warning("[RAG] Could not delete the unfinished %s of %s: %s", doc_id, workspace, result.message)


async def _anchors_missing(rag: Any, documents: dict[str, Any]) -> bool:
    """Whether a document whose merge into the graph began lacks its recovery anchors."""
    for doc_id, status in documents.items():
        metadata = status_fields(status).get("metadata")
        if not isinstance(metadata, dict) or metadata.get("kg_write_state") != GRAPH_MUTATION_STARTED:
            continue
        entities = await rag.full_entities.get_by_id(doc_id)
        relations = await rag.full_relations.get_by_id(doc_id)
        if not (isinstance(entities, dict) and "entity_names" in entities) or not (
            isinstance(relations, dict) and "relation_pairs" in relations
        ):
            return True
    return False


async def _rebuild_anchors(rag: Any, workspace: str) -> None:
    started = time.monotonic()
    repair = importlib.import_module("lightrag.tools.kg_integrity_repair")
    report = await repair.audit_kg_integrity(rag, apply=True)
    log.info(
        "[RAG] Rebuilt LightRAG's recovery anchors of %s from its graph (%d entities, %d relations) in %.2fs",
        workspace, report.get("entities_total", 0), report.get("relations_total", 0), time.monotonic() - started,
    )  # fmt: skip


def status_fields(value: Any) -> dict[str, Any]:
    """The fields of a LightRAG document status, which some storages give as a dict and others as an object."""
    if isinstance(value, dict):
        return value
    return dict(getattr(value, "__dict__", {}))


def status_of(value: Any) -> str:
    """A LightRAG document status's state ("processed", "failed", ...)."""
    status = status_fields(value).get("status")
    return str(getattr(status, "value", status))

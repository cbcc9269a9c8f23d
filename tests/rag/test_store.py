"""The indexing queue: durable across a kill, retried with backoff, failures logged; the service's error paths."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.context.estimator import TokenEstimator
from bot.rag.backend import GraphView, RagBackendError, RagQuery, RagSnippet
from bot.rag.documents import RagDocument
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore
from bot.settings import RuntimeConfig


def test_queued_exchanges_survive_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "rag" / "documents.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tests.rag.queue_writer", str(path), "3"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -9 and "QUEUED" in done.stdout
    with path.open("a") as handle:  # and a torn line, as if the kill had come mid-append
        handle.write('{"id": "conv_torn", "sta')

    async def reload() -> list[str]:
        return [doc.id for doc in await RagDocumentStore(path).due(time.time(), 10)]

    assert asyncio.run(reload()) == ["conv_test_1_0", "conv_test_1_1", "conv_test_1_2"]


class ScriptedBackend:
    """A backend whose inserts fail a given number of times and whose queries fail or hang on demand."""

    name = "scripted"
    keeps_workspaces_apart = True

    def __init__(self, insert_failures: int = 0, query_error: Exception | None = None) -> None:
        self.insert_failures = insert_failures
        self.query_error = query_error
        self.inserted: list[str] = []

    async def insert(self, workspace: str, documents: list[RagDocument]) -> dict[str, str]:
        if self.insert_failures:
            self.insert_failures -= 1
            raise RagBackendError("the model endpoint is down")
        self.inserted += [doc.id for doc in documents]
        return {doc.id: doc.id for doc in documents}

    async def query(self, workspace: str, query: RagQuery) -> list[RagSnippet]:
        if self.query_error is not None:
            raise self.query_error
        return [RagSnippet("chunk", "User: the boat is called Nautilus")]

    async def delete(self, workspace: str, backend_ids: list[str]) -> None:
        return None

    async def delete_named(self, workspace: str, names: list[str], deleted: Collection[str] = ()) -> list[str]:
        return [name for name in names if name not in deleted]

    async def graph(self, workspace: str, max_entities: int, around: str | None = None) -> GraphView:
        return GraphView((), (), 0)  # it extracts nothing

    async def search_entities(self, workspace: str, query: str, limit: int) -> list[str]:
        return []

    async def open(self, workspace: str) -> None:
        return None

    async def close(self) -> None:
        return None


def service_with(tmp_path: Path, backend: ScriptedBackend, **rag: object) -> RagService:
    config = RuntimeConfig.model_validate({"rag": {"retryBackoffSeconds": 10.0, **rag}})
    return RagService(RagDocumentStore(tmp_path / "documents.jsonl"), backend, lambda: config, TokenEstimator())


async def queue_one(service: RagService) -> RagDocument:
    config = RuntimeConfig.model_validate({"rag": {"minExchangeChars": 10}})
    doc = await service.enqueue(
        config, "test:1", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "what is my boat called?", "Nautilus.", ["m1"]
    )
    assert doc is not None and doc.id == "conv_test_1_20260102_030405"
    return doc


async def test_a_failed_batch_is_retried_after_a_growing_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = ScriptedBackend(insert_failures=2)
    service = service_with(tmp_path, backend)
    doc = await queue_one(service)
    caplog.set_level(logging.INFO)

    assert await service.flush() == 0
    assert "[RAG] Indexing 1 documents into global failed (try 1)" in caplog.text
    assert "will retry with backoff" in caplog.text
    first_wait = doc.next_attempt_at - time.time()
    assert 9 < first_wait <= 10
    assert await service.flush() == 0  # not due yet: nothing is tried
    assert doc.attempts == 1

    doc.next_attempt_at = 0
    assert await service.flush() == 0
    assert 19 < doc.next_attempt_at - time.time() <= 20  # doubled
    assert (await service.status()).last_error == "RagBackendError: the model endpoint is down"

    doc.next_attempt_at = 0
    assert await service.flush() == 1
    assert backend.inserted == [doc.id]
    status = await service.status()
    assert (status.indexed, status.queued, status.last_error) == (1, 0, None)


async def test_after_max_attempts_a_document_is_set_aside(tmp_path: Path) -> None:
    service = service_with(tmp_path, ScriptedBackend(insert_failures=5), maxAttempts=2, retryBackoffSeconds=0.0)
    await queue_one(service)
    await service.flush()
    await service.flush()
    status = await service.status()
    assert (status.queued, status.failed) == (0, 1)
    assert "1 given up" in status.describe()


async def test_a_retrieval_error_leaves_the_prompt_without_relevant_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = service_with(tmp_path, ScriptedBackend(query_error=RagBackendError("vector store unavailable")))
    await queue_one(service)
    await service.flush()
    config = RuntimeConfig()
    retrieved = await service.retrieve(config, "test:1", "boat name?", shown=lambda: "")
    assert (retrieved.text, retrieved.outcome) == ("", "error")
    assert "[RAG] Retrieval failed (vector store unavailable); answering without Relevant Memory" in caplog.text


async def test_nothing_is_asked_of_lightrag_before_anything_was_indexed(tmp_path: Path) -> None:
    service = service_with(tmp_path, ScriptedBackend(query_error=AssertionError("must not be called")))
    retrieved = await service.retrieve(RuntimeConfig(), "test:1", "boat name?", shown=lambda: "")
    assert retrieved.outcome == "empty"


async def test_a_snippet_the_memory_pack_shows_already_is_dropped(tmp_path: Path) -> None:
    service = service_with(tmp_path, ScriptedBackend())
    await queue_one(service)
    await service.flush()
    shown = "## Today's Notes\n[10:00] User: the boat is called Nautilus | Assistant: Nice name."
    retrieved = await service.retrieve(RuntimeConfig(), "test:1", "boat name?", shown=lambda: shown)
    assert (retrieved.text, retrieved.dropped_as_shown) == ("", 1)
    other = "## Long-term Memory\nLikes tea."
    fresh = await service.retrieve(RuntimeConfig(), "test:1", "boat name?", shown=lambda: other)
    assert fresh.text == (
        "# Relevant Memory\nFrom past conversations; it may be outdated.\n## Past Exchanges\n"
        "- User: the boat is called Nautilus"
    )


async def test_an_older_journal_line_without_tried_names_reads_and_a_try_records_the_name_before_the_insert(
    tmp_path: Path,
) -> None:
    path = tmp_path / "documents.jsonl"
    doc_id = "conv_test_1_20260102_030405"
    older: dict[str, Any] = {
        "id": doc_id, "sessionId": "test:1", "ragWorkspace": "global",
        "text": "User: what is my boat called?\nAssistant: Nautilus.", "createdAt": "2026-01-02T03:04:05+00:00",
        "messageIds": ["m1"], "status": "queued", "attempts": 0, "nextAttemptAt": 0.0, "lastError": None,
        "backendId": None,
    }  # fmt: skip
    path.write_text(json.dumps(older) + "\n")
    service = service_with(tmp_path, ScriptedBackend(insert_failures=1))
    doc = await service.store.get(doc_id)
    assert doc is not None and doc.tried_as == [] and doc.to_json() == older  # written back as it was read

    assert await service.flush() == 0
    *_, last = path.read_text().splitlines()
    assert json.loads(last)["triedAs"] == [doc_id] and json.loads(last)["attempts"] == 1
    reread = await RagDocumentStore(path).get(doc_id)
    assert reread is not None and reread.tried_as == [doc_id] and "Nautilus" in reread.text


def test_the_name_a_document_was_sent_in_last_stays_last_and_once() -> None:
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    assert doc.note_tried("batch_1") and doc.note_tried("batch_2") and doc.note_tried("batch_1")
    assert not doc.note_tried("batch_1")
    assert doc.tried_as == ["batch_2", "batch_1"]

"""What LightRAG did not finish is indexed again: a failed extraction, and what a kill left in its files.

Both through the real embedded LightRAG (file storages) and the fake model server."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI, Fault
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, queued_count, rag_of, say
from tests.waiting import wait_until

FACT = "My sister Marta moved to Lisbon last week, she loves it there."


async def test_an_exchange_whose_extraction_failed_is_indexed_at_the_next_try(
    rag_bot: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, workspace_dir: Path
) -> None:
    await say(rag_bot, channel, "1", FACT)
    await _wait_queued(rag_bot)
    fake_openai.fail_next(1, Fault.status(400, "This model is overloaded just now"))
    assert await rag_of(rag_bot).flush() == 0
    assert "overloaded" in str((await rag_of(rag_bot).status()).last_error)

    # LightRAG keeps the document it failed, and refuses the same id again as a duplicate: it is deleted first.
    assert await rag_of(rag_bot).flush() == 1
    status = await rag_of(rag_bot).status()
    assert (status.indexed, status.queued, status.last_error) == (1, 0, None)
    statuses = _read(workspace_dir / "rag" / "global" / "kv_store_doc_status.json")
    assert [entry["status"] for entry in statuses.values()] == ["processed"]
    assert "Marta" in (workspace_dir / "rag" / "global" / "graph_chunk_entity_relation.graphml").read_text()


async def test_a_document_a_kill_left_half_merged_is_indexed_again_at_the_next_start_without_an_error(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    first = build_rag_bot(workspace_dir, fake_openai)
    try:
        await say(first, channel, "1", FACT)
        await _wait_queued(first)
        assert await rag_of(first).flush() == 1
    finally:
        await first.stop()
        await rag_of(first).close()
    # What a SIGKILL in the middle of the document's merge leaves on disk: LightRAG's file storages had written
    # its status (processing, its merge begun) and not its recovery anchors; the journal had recorded the try
    # and not the end of it.
    graph = workspace_dir / "rag" / "global"
    statuses = _read(graph / "kv_store_doc_status.json")
    [doc_id] = statuses
    statuses[doc_id]["status"] = "processing"
    statuses[doc_id]["metadata"]["kg_write_state"] = "graph_mutation_started"
    _write(graph / "kv_store_doc_status.json", statuses)
    for anchors in ("kv_store_full_entities.json", "kv_store_full_relations.json"):
        _write(graph / anchors, {key: row for key, row in _read(graph / anchors).items() if key != doc_id})
    journal = workspace_dir / "rag" / "documents.jsonl"
    lines = journal.read_text().splitlines()
    while json.loads(lines[-1])["status"] == "indexed":
        lines.pop()
    journal.write_text("\n".join(lines) + "\n")
    caplog.clear()

    again = build_rag_bot(workspace_dir, fake_openai)
    try:
        assert (await rag_of(again).status()).queued == 1
        assert await rag_of(again).flush() == 1
        assert (await rag_of(again).status()).queued == 0
    finally:
        await again.stop()
        await rag_of(again).close()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
    assert "1 documents of global were left unfinished by the last stop" in caplog.text
    assert "Rebuilt LightRAG's recovery anchors of global" in caplog.text
    assert "Document statuses not found" not in caplog.text  # asking LightRAG for what it holds says nothing
    assert [entry["status"] for entry in _read(graph / "kv_store_doc_status.json").values()] == ["processed"]
    assert doc_id in _read(graph / "kv_store_full_entities.json")  # a forget can take it out of the graph again
    assert "Marta" in (graph / "graph_chunk_entity_relation.graphml").read_text()


async def _wait_queued(services: Application) -> None:
    async def queued() -> bool:
        return await queued_count(services) > 0

    await wait_until(queued)


def _read(path: Path) -> dict[str, Any]:
    loaded = json.loads(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data))

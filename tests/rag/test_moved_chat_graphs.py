"""A chat whose id changed (a group upgraded to a supergroup): its knowledge graph stays where it is, and the new
chat's retrievals read it beside their own, on the journal's file and on its table alike; never the owner's graph
for another chat's sake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.context.estimator import TokenEstimator
from bot.rag.backend import RagQuery, RagSnippet
from bot.rag.journal_table import RagJournalTable
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore, RagJournal
from bot.settings import RuntimeConfig
from tests.postgres_server import OpenDatabases
from tests.rag.test_store import ScriptedBackend

OLD, NEW = "test:-4001", "test:-1004001"
CHAT = RuntimeConfig.model_validate({"memory": {"scope": "chat"}, "rag": {"minExchangeChars": 10}})
# What made a group's documents go into the owner's graph: the owner's memory read in every chat.
EVERYWHERE = RuntimeConfig.model_validate({"memory": {"ownerMemoryEverywhere": True}, "rag": {"minExchangeChars": 10}})


class GraphsAsked(ScriptedBackend):
    """Records the workspaces each retrieval asks."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def query(self, workspace: str, query: RagQuery) -> list[RagSnippet]:
        self.asked.append(workspace)
        return await super().query(workspace, query)


@pytest.fixture(params=["file", "table"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RagJournal]:
    if request.param == "file":
        yield RagDocumentStore(tmp_path / "documents.jsonl")
        return
    databases = OpenDatabases(request.getfixturevalue("postgres_database"))
    try:
        yield RagJournalTable(await databases.open(), lambda: CHAT.rag)
    finally:
        await databases.close()


async def indexed(service: RagService, config: RuntimeConfig, session_id: str, text: str) -> None:
    at = datetime(2026, 5, 1, 9, len(text) % 60, tzinfo=UTC)
    assert await service.enqueue(config, session_id, at, text, "Noted, thank you.", [f"m{len(text)}"]) is not None
    assert await service.flush() == 1


async def asked(service: RagService, backend: GraphsAsked, session_id: str) -> list[str]:
    backend.asked.clear()
    await service.retrieve(CHAT, session_id, "what is the boat called?", lambda: "")
    return backend.asked


async def test_the_new_chat_reads_the_graph_of_its_earlier_id_and_its_own_and_never_the_owners(
    journal: RagJournal,
) -> None:
    backend = GraphsAsked()
    service = RagService(journal, backend, lambda: CHAT, TokenEstimator())
    await indexed(service, CHAT, OLD, "the boat is called Nautilus")
    await indexed(service, EVERYWHERE, NEW, "the owner keeps a diary")  # into `global`, the owner's graph
    assert await asked(service, backend, NEW) == []  # its own graph holds nothing yet, and `global` is not its

    assert await service.move_chat(OLD, NEW) == 1
    assert await asked(service, backend, NEW) == ["chat_test_-4001"]
    await indexed(service, CHAT, NEW, "the harbour is in Brest")
    assert await asked(service, backend, NEW) == ["chat_test_-1004001", "chat_test_-4001"]
    assert await service.move_chat(OLD, NEW) == 0  # run again (a move finished after a crash): nothing more

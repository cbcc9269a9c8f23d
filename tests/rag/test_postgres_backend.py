"""`rag.backend: postgres`: LightRAG's PostgreSQL storages against a real PostgreSQL with pgvector.

The server is the test process's own (`tests/postgres_server.py`), the database this module's; both
variants run: vectors in PostgreSQL (`rag.postgresVectors: pgvector`) and vectors in files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.llm.client import LlmClient
from bot.rag.backend import RagQuery
from bot.rag.documents import RagDocument
from bot.rag.embedded import EmbeddedLightRag
from bot.settings import RagConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.postgres_server import PostgresServer
from tests.rag.helpers import FAST_RAG, lightrag_responder


@pytest.fixture(scope="module")
def postgres(postgres_server: PostgresServer, postgres_database: str) -> dict[str, str]:
    return postgres_server.lightrag_environment(postgres_database.rsplit("/", 1)[-1])


@pytest.mark.parametrize("vectors", ["files", "pgvector"])
async def test_documents_live_in_postgresql_per_chat_workspace(
    vectors: str,
    postgres: dict[str, str],
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in postgres.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POSTGRES_WORKSPACE", raising=False)
    fake_openai.set_responder(lightrag_responder)
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "backend": "postgres", "postgresVectors": vectors})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model", "postgres")
    first, second = f"chat_a_{vectors}", f"chat_b_{vectors}"
    try:
        text = "User: my sister Marta lives in Lisbon\nAssistant: Lisbon is lovely."
        await backend.insert(first, [RagDocument("conv_a", "test:a", first, text, "")])
        found = await backend.query(first, RagQuery("where does Marta live", "naive", 10, 5, 1000))
        assert any("Lisbon" in snippet.text for snippet in found)
        graph = await backend.query(first, RagQuery("Marta Lisbon", "local", 10, 5, 1000))
        assert any(snippet.kind == "entity" and snippet.text.startswith("Marta") for snippet in graph)
        assert await backend.query(second, RagQuery("where does Marta live", "naive", 10, 5, 1000)) == []

        await backend.delete(first, ["conv_a"])
        assert not any("Lisbon" in s.text for s in await backend.query(first, RagQuery("Marta", "naive", 10, 5, 1000)))
    finally:
        await backend.close()
        await llm.close()
    assert not (tmp_path / "rag" / first / "kv_store_full_docs.json").exists()  # the documents are in PostgreSQL


async def test_a_shared_postgres_workspace_variable_is_refused(
    postgres: dict[str, str], tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in postgres.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("POSTGRES_WORKSPACE", "everything")
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "backend": "postgres"})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model", "postgres")
    try:
        with pytest.raises(Exception, match="unset POSTGRES_WORKSPACE"):
            await backend.query("global", RagQuery("anything", "naive", 5, 5, 500))
    finally:
        await backend.close()
        await llm.close()

"""`rag.backend: postgres`: LightRAG's PostgreSQL storages against a real PostgreSQL with pgvector.

The server is the test process's own (`tests/postgres_server.py`), the database this module's; both
variants run: vectors in PostgreSQL (`rag.postgresVectors: pgvector`) and vectors in files. With
`BOT_DATABASE_URL` and nothing else, the bot keeps its graph in that database (a test database of its own).
"""

from __future__ import annotations

from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.app import Application
from bot.llm.client import LlmClient
from bot.rag.backend import RagQuery
from bot.rag.documents import RagDocument
from bot.rag.embedded import EmbeddedLightRag, lightrag_postgres_environment
from bot.settings import RagConfig
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.postgres_server import PostgresServer
from tests.rag.helpers import FAST_RAG, lightrag_responder, queued_count, rag_of, say, write_runtime_config
from tests.waiting import wait_until


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

        # The console's drawing, read from LightRAG's tables: descriptions, the chunk's text, the relation.
        drawn = await backend.graph(first, 400)
        entities = {entity.name: entity for entity in drawn.entities}
        assert set(entities) == {"Marta", "Lisbon"} and drawn.total == 2
        assert any("Marta lives in Lisbon" in text for text in entities["Marta"].descriptions)
        assert entities["Marta"].sources == (text,) and entities["Marta"].documents == ("conv_a",)
        [relation] = drawn.relations
        assert {relation.source, relation.target} == {"Marta", "Lisbon"}
        assert relation.description == "Marta and Lisbon came up together"
        top = await backend.graph(first, 1)
        assert [entity.name for entity in top.entities] == ["Lisbon"] and top.relations == () and top.total == 2
        assert (await backend.graph(second, 400)).entities == ()
        # The search and a neighbourhood, from the tables: the names containing the query, ranked; one's relations.
        assert await backend.search_entities(first, "s", 10) == ["Lisbon"]
        assert await backend.search_entities(first, "a", 10) == ["Marta"]
        assert await backend.search_entities(first, "lis", 10) == ["Lisbon"]
        assert await backend.search_entities(second, "lis", 10) == []
        around = await backend.graph(first, 400, around="Lisbon")
        assert {entity.name for entity in around.entities} == {"Marta", "Lisbon"} and len(around.relations) == 1
        assert {e.name: e for e in around.entities}["Lisbon"].sources == (text,)
        assert (await backend.graph(first, 400, around="Oslo")).entities == ()

        await backend.delete(first, ["conv_a"])
        assert not any("Lisbon" in s.text for s in await backend.query(first, RagQuery("Marta", "naive", 10, 5, 1000)))
        assert (await backend.graph(first, 400)).entities == ()
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


async def test_with_bot_database_url_alone_the_graph_lives_in_that_database_and_an_exchange_is_found(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [*lightrag_postgres_environment(database_url), "POSTGRES_WORKSPACE"]:
        monkeypatch.setenv(name, "")  # put back as it was after the test (the bot sets them from the URL)
        monkeypatch.delenv(name)
    workspace = tmp_path / "workspace"
    # rag.backend stays the default: nothing but BOT_DATABASE_URL says PostgreSQL. Memory off: its notes would
    # hold the fact already, and the graph's snippet would be left out as known.
    write_runtime_config(workspace, memory={"enabled": False})
    fake_openai.set_responder(lightrag_responder)
    bot = Application(env_for(workspace, fake_openai, bot_database_url=database_url))
    channel = RecordingChannel()
    bot.add_channels([channel])
    await bot.start()
    try:
        await say(bot, channel, "1", "My sister Marta moved to Lisbon last week, she loves it there.")

        async def queued() -> bool:
            return await queued_count(bot) > 0

        await wait_until(queued)
        assert await rag_of(bot).flush() == 1
        await say(bot, channel, "1", "/new")  # the live session would show the fact already
        await say(bot, channel, "1", "Where does Marta live these days?")
        system = fake_openai.system_prompts()[-1] or ""
    finally:
        await bot.stop()
    assert "Marta moved to Lisbon" in system.split("# Relevant Memory", 1)[1]
    # LightRAG's tables in the bot's database hold the exchange and its vectors (pgvector); no graph files.
    connection = await asyncpg.connect(database_url)
    try:
        documents = await connection.fetch("SELECT workspace, content FROM lightrag_doc_full")
        vector_tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'lightrag_vdb_chunks%'"
        )
        chunks = sum(
            [await connection.fetchval(f'SELECT count(*) FROM "{row["table_name"]}"') for row in vector_tables]
        )
        vector_columns = await connection.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_name LIKE 'lightrag_vdb_chunks%'"
            " AND udt_name = 'vector'"
        )
    finally:
        await connection.close()
    assert [row["workspace"] for row in documents] == ["global"]
    assert "Marta moved to Lisbon" in documents[0]["content"]
    assert chunks >= 1 and vector_columns >= 1
    assert list((workspace / "rag").glob("**/kv_store_*.json")) == []
    assert list((workspace / "rag").glob("**/vdb_*.json")) == []

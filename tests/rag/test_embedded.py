"""lightrag-hku embedded: documents indexed through the fake model, retrieved, deleted; files in the workspace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bot.llm.client import LlmClient
from bot.rag.backend import RagQuery
from bot.rag.documents import RagDocument
from bot.rag.embedded import EmbeddedLightRag
from bot.settings import RagConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.rag.helpers import FAST_RAG, lightrag_responder


def doc(doc_id: str, text: str) -> RagDocument:
    return RagDocument(id=doc_id, session_id="test:1", rag_workspace="global", text=text, created_at="")


async def test_insert_query_delete_with_the_files_in_the_workspace(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.set_responder(lightrag_responder)
    llm = LlmClient("sk-test", fake_openai.base_url)
    # The endpoint's embeddings here (the default is the bundled model: see test_zero_model_calls).
    config = RagConfig.model_validate({**FAST_RAG, "embeddingModel": "text-embedding-3-small"})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model")
    try:
        ids = await backend.insert(
            "global",
            [
                doc("conv_a", "User: my sister Marta lives in Lisbon\nAssistant: Lisbon is lovely in spring."),
                doc("conv_b", "User: the Falcon rocket launch is on Friday\nAssistant: I will remind you."),
            ],
        )
        assert ids == {"conv_a": "conv_a", "conv_b": "conv_b"}
        found = await backend.query("global", RagQuery("where does Marta live", "naive", 10, 5, 1000))
        assert any("Lisbon" in snippet.text and snippet.kind == "chunk" for snippet in found)
        graph = await backend.query("global", RagQuery("Marta Lisbon", "local", 10, 5, 1000))
        assert any(snippet.kind == "entity" and snippet.text.startswith("Marta") for snippet in graph)

        # The console's drawing: each entity with its descriptions and the text of the chunks it came from.
        drawn = await backend.graph("global", 400)
        entities = {entity.name: entity for entity in drawn.entities}
        assert set(entities) == {"Marta", "Lisbon", "Falcon", "Friday"} and drawn.total == 4
        marta = entities["Marta"]
        assert marta.type == "concept" and marta.documents == ("conv_a",)
        assert any("Marta lives in Lisbon" in text for text in marta.descriptions)
        assert [source for source in marta.sources if "my sister Marta lives in Lisbon" in source]
        [relation] = [r for r in drawn.relations if {r.source, r.target} == {"Marta", "Lisbon"}]
        assert relation.description == "Marta and Lisbon came up together" and relation.keywords == "mentioned together"
        # The most connected first, ties by name; the labels counted for the total.
        top = await backend.graph("global", 2)
        assert [entity.name for entity in top.entities] == ["Falcon", "Friday"] and top.total == 4
        # The search reaches every name, ranked as LightRAG ranks them; a neighbourhood is drawn around one.
        assert await backend.search_entities("global", "a", 10) == ["Marta", "Falcon", "Friday"]
        assert await backend.search_entities("global", "a", 2) == ["Marta", "Falcon"]
        assert await backend.search_entities("global", "MAR", 10) == ["Marta"]
        assert await backend.search_entities("global", "Oslo", 10) == []
        around = await backend.graph("global", 400, around="Marta")
        assert {entity.name for entity in around.entities} == {"Marta", "Lisbon"} and around.total == 2
        assert not around.truncated and [(r.source, r.target) for r in around.relations] == [("Lisbon", "Marta")]
        assert [s for s in {e.name: e for e in around.entities}["Marta"].sources if "Marta lives in Lisbon" in s]
        assert (await backend.graph("global", 400, around="Oslo")).entities == ()

        await backend.delete("global", ["conv_a"])
        after = await backend.query("global", RagQuery("where does Marta live", "naive", 10, 5, 1000))
        assert not any("Lisbon" in snippet.text for snippet in after)
        assert {entity.name for entity in (await backend.graph("global", 400)).entities} == {"Falcon", "Friday"}
    finally:
        await backend.close()
        await llm.close()
    stored = tmp_path / "rag" / "global"
    assert (stored / "kv_store_full_docs.json").is_file()
    on_disk = "".join(path.read_text(errors="replace") for path in stored.iterdir() if path.is_file())
    assert "Marta lives in Lisbon" not in on_disk  # nothing of the deleted document is left, caches included
    assert "Falcon rocket" in on_disk
    # Embeddings came from the endpoint, extraction from its chat model: both through LlmClient.
    assert any(r.path == "/v1/embeddings" for r in fake_openai.requests)


async def test_deleting_by_name_removes_what_lightrag_holds_and_skips_a_name_it_does_not(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.set_responder(lightrag_responder)
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "embeddingModel": "text-embedding-3-small"})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model")
    try:
        await backend.insert("global", [doc("convbatch_a_2_1234abcd", "User: my locker code is Quartz 77")])
        await backend.insert("global", [doc("conv_b", "User: the Falcon rocket launch is on Friday")])
        names = ["conv_never_sent", "convbatch_a_2_1234abcd", "conv_b"]
        assert await backend.delete_named("global", names, deleted={"conv_b"}) == ["convbatch_a_2_1234abcd"]
        assert await backend.delete_named("global", ["convbatch_a_2_1234abcd"]) == []  # held no longer
        found = await backend.query("global", RagQuery("locker code Quartz Falcon rocket", "naive", 10, 5, 1000))
        assert not any("Quartz" in snippet.text for snippet in found)
        assert any("Falcon" in snippet.text for snippet in found)
    finally:
        await backend.close()
        await llm.close()


def test_lightrag_is_opened_without_pypinyin_and_says_nothing_of_it() -> None:
    # A process of its own: this worker may have imported lightrag already.
    opened = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging, sys; logging.basicConfig(level=logging.DEBUG)\n"
            "from bot.rag.embedded import _import_lightrag\n"
            "_import_lightrag()\n"
            "import lightrag.utils\n"
            "print('pypinyin' in sys.modules, lightrag.utils.get_pinyin_sort_key('Zeta'))\n"
            "import pypinyin\n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.split() == ["False", "zeta"]
    assert "pypinyin" not in opened.stderr

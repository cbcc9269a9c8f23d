"""The file graph's batched reads answer exactly what LightRAG's one-by-one reads answer."""

from __future__ import annotations

from pathlib import Path

from lightrag.base import BaseGraphStorage

from bot.llm.client import LlmClient
from bot.rag.embedded import EmbeddedLightRag
from bot.settings import RagConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.rag.helpers import FAST_RAG, lightrag_responder
from tests.rag.test_embedded import doc


async def test_batched_reads_match_the_one_by_one_reads(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.set_responder(lightrag_responder)
    llm = LlmClient("sk-test", fake_openai.base_url)
    config = RagConfig.model_validate({**FAST_RAG, "embeddingModel": "text-embedding-3-small"})
    backend = EmbeddedLightRag(tmp_path / "rag", llm, lambda: config, lambda: "fake-model")
    try:
        await backend.insert(
            "global",
            [
                doc("conv_a", "User: Marta met Ivan in Lisbon about Falcon.\nAssistant: Noted, Marta and Ivan."),
                doc("conv_b", "User: Ivan flies to Porto with Sofia.\nAssistant: Safe travels to Porto, Ivan."),
            ],
        )
        graph = (await backend._instance("global")).chunk_entity_relation_graph
        assert type(graph).__name__ == "BatchedNetworkXStorage"
        nodes = ["Marta", "Ivan", "Lisbon", "Porto", "Sofia", "Nobody"]
        pairs = [("Marta", "Ivan"), ("Ivan", "Marta"), ("Ivan", "Lisbon"), ("Porto", "Sofia"), ("Nobody", "Ivan")]
        assert {"Marta", "Ivan", "Porto"} <= set(await graph.get_nodes_batch(nodes))
        assert await graph.get_nodes_batch(nodes) == await BaseGraphStorage.get_nodes_batch(graph, nodes)
        assert await graph.node_degrees_batch(nodes) == await BaseGraphStorage.node_degrees_batch(graph, nodes)
        assert await graph.get_nodes_edges_batch(nodes) == await BaseGraphStorage.get_nodes_edges_batch(graph, nodes)
        assert await graph.edge_degrees_batch(pairs) == await BaseGraphStorage.edge_degrees_batch(graph, pairs)
        as_dicts = [{"src": src, "tgt": tgt} for src, tgt in pairs]
        edges = await graph.get_edges_batch(as_dicts)
        assert ("Marta", "Ivan") in edges and ("Ivan", "Marta") in edges
        assert edges == await BaseGraphStorage.get_edges_batch(graph, as_dicts)
    finally:
        await backend.close()
        await llm.close()

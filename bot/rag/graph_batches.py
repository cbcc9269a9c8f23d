"""Batched reads for LightRAG's file graph storage (`NetworkXStorage`), which answers them one by one.

A query asks the graph for a few hundred nodes, edges and degrees at once (`get_edges_batch` and
friends). `NetworkXStorage` inherits the base class's loops, so each item is a separate call that
takes and releases the storage's lock, and a release always schedules a task: a large graph made that
hundreds of event-loop turns a query, a good part of its time. Here each
batch takes the graph once and reads every item from it without a suspension point in between
(what the single-item reads do per item), with the same results: copies of the attribute dicts,
degree 0 and no entry for what is missing.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

log = logging.getLogger(__name__)

_batched_class: type | None = None


def use_batched_reads(graph_storage: Any) -> None:
    """Give a `NetworkXStorage` instance the batched reads (other storages are left as they are)."""
    base = importlib.import_module("lightrag.kg.networkx_impl").NetworkXStorage
    if type(graph_storage) is base:
        graph_storage.__class__ = _batched(base)


def _batched(base: type) -> type:
    global _batched_class
    if _batched_class is not None:
        return _batched_class

    class BatchedNetworkXStorage(base):  # type: ignore[misc]
        """`NetworkXStorage` whose batch reads take the graph once per batch."""

        async def get_nodes_batch(self, node_ids: list[str]) -> dict[str, dict[str, Any]]:
            graph = await self._get_graph()
            nodes = graph.nodes
            return {node_id: dict(nodes[node_id]) for node_id in node_ids if node_id in nodes}

        async def node_degrees_batch(self, node_ids: list[str]) -> dict[str, int]:
            graph = await self._get_graph()
            return {node_id: graph.degree(node_id) if node_id in graph else 0 for node_id in node_ids}

        async def edge_degrees_batch(self, edge_pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
            graph = await self._get_graph()

            def degree(node_id: str) -> int:
                return int(graph.degree(node_id)) if node_id in graph else 0

            return {(src, tgt): degree(src) + degree(tgt) for src, tgt in edge_pairs}

        async def get_edges_batch(self, pairs: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
            graph = await self._get_graph()
            found: dict[tuple[str, str], dict[str, Any]] = {}
            for pair in pairs:
                edge = graph.get_edge_data(pair["src"], pair["tgt"])
                if edge is not None:
                    found[(pair["src"], pair["tgt"])] = dict(edge)
            return found

        async def get_nodes_edges_batch(self, node_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
            graph = await self._get_graph()
            return {node_id: list(graph.edges(node_id)) if node_id in graph else [] for node_id in node_ids}

    _batched_class = BatchedNetworkXStorage
    return BatchedNetworkXStorage

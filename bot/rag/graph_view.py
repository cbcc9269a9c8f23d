"""The knowledge graph as the console draws it, read from LightRAG's own answer (`get_knowledge_graph` in the
process, `GET /graphs` from a server: `{"nodes": [{"id", "properties"}], "edges": [{"source", "target",
"properties"}], "is_truncated"}`), and every chat's graph drawn as one."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.rag.backend import GraphEntity, GraphRelation, GraphView
from bot.rag.documents import EXCHANGE_HEADER, RagDocument

# LightRAG joins the several values of one property (descriptions, chunk ids, document names) with this.
SEPARATOR = "<SEP>"
# The chunks (or documents) an entity was drawn from that are read for its sources, the latest: an entity
# that comes up in every conversation would otherwise have the page read most of the graph's text.
MAX_SOURCES_PER_ENTITY = 5


def split_joined(value: Any) -> list[str]:
    """The values LightRAG joined into one property, each once, in order."""
    parts = (part.strip() for part in str(value or "").split(SEPARATOR))
    return list(dict.fromkeys(part for part in parts if part))


def source_chunk_ids(knowledge_graph: Mapping[str, Any]) -> list[str]:
    """The chunks whose text the entities of `knowledge_graph` show (the latest of each), each once."""
    wanted: dict[str, None] = {}
    for node in knowledge_graph.get("nodes") or []:
        for chunk_id in _latest(split_joined((node.get("properties") or {}).get("source_id"))):
            wanted[chunk_id] = None
    return list(wanted)


def view_of(knowledge_graph: Mapping[str, Any], total: int, chunks: Mapping[str, str] | None = None) -> GraphView:
    """`knowledge_graph` as the console draws it; `chunks` (text by chunk id) gives each entity its sources,
    `total` the entities of the whole graph."""
    chunks = chunks or {}
    entities: list[GraphEntity] = []
    for node in knowledge_graph.get("nodes") or []:
        properties = node.get("properties") or {}
        name = str(node.get("id") or properties.get("entity_id") or "")
        if not name:
            continue
        chunk_ids = _latest(split_joined(properties.get("source_id")))
        entities.append(
            GraphEntity(
                name=name,
                type=str(properties.get("entity_type") or ""),
                descriptions=tuple(split_joined(properties.get("description"))),
                sources=tuple(chunks[chunk_id] for chunk_id in chunk_ids if chunk_id in chunks),
                documents=tuple(split_joined(properties.get("file_path"))),
            )
        )
    relations = [
        GraphRelation(
            source=str(edge.get("source", "")),
            target=str(edge.get("target", "")),
            description="; ".join(split_joined((edge.get("properties") or {}).get("description"))),
            keywords=str((edge.get("properties") or {}).get("keywords") or ""),
        )
        for edge in knowledge_graph.get("edges") or []
    ]
    truncated = bool(knowledge_graph.get("is_truncated"))
    return GraphView(tuple(entities), tuple(relations), max(total, len(entities)), truncated)


def merged(views: Sequence[GraphView], max_entities: int, around: str | None = None) -> GraphView:
    """Several chats' graphs drawn as one: an entity of several graphs is one, with the descriptions and
    sources of each; the `max_entities` most connected are kept (ties by name), with the relations between them;
    with `around` (the views are its neighbourhoods), the nearest it first, then the most connected.
    `total` counts an entity that is not drawn once per graph that holds it."""
    by_name: dict[str, GraphEntity] = {}
    for view in views:
        for entity in view.entities:
            known = by_name.get(entity.name)
            by_name[entity.name] = entity if known is None else _joined(known, entity)
    relations = [relation for view in views for relation in view.relations]
    degree = dict.fromkeys(by_name, 0)
    for relation in relations:
        for end in (relation.source, relation.target):
            if end in degree:
                degree[end] += 1
    hops = _hops_from(around, relations) if around is not None else {}
    beyond = len(by_name)  # further than any entity reached (every entity, when drawing the whole graph)
    ranked = sorted(degree, key=lambda name: (hops.get(name, beyond), -degree[name], name))
    kept = set(ranked[:max_entities])
    undrawn = sum(max(0, view.total - len(view.entities)) for view in views)
    return GraphView(
        tuple(entity for name, entity in by_name.items() if name in kept),
        tuple(relation for relation in relations if relation.source in kept and relation.target in kept),
        len(by_name) + undrawn,
        len(kept) < len(by_name) or any(view.truncated for view in views),
    )


def ranked_names(query: str, found: Iterable[Iterable[str]], limit: int) -> list[str]:
    """The names several graphs found for `query`, each once, ranked as LightRAG ranks one graph's: the name
    itself, then the names starting with it, then the others, the shortest and those where it starts a word
    first; ties by name."""
    wanted = query.strip().lower()  # lower(), not casefold(): LightRAG's own folding

    def rank(name: str) -> tuple[int, str]:
        folded = name.lower()
        if folded == wanted:
            return -1000, name
        if folded.startswith(wanted):
            return -500, name
        starts_word = f" {wanted}" in folded or f"_{wanted}" in folded
        return -(100 - len(name) + (50 if starts_word else 0)), name

    return sorted({name for names in found for name in names}, key=rank)[:limit]


def with_journal_sources(view: GraphView, documents: Iterable[RagDocument]) -> GraphView:
    """`view` with the sources its backend could not read (a LightRAG server serves no chunk's text) taken from
    the bot's own journal: the text of each exchange or part sent in the documents an entity names. The journal
    keeps an indexed exchange's text only while a batch shares it; one indexed alone is named by its chat and
    date."""
    texts: dict[str, list[str]] = defaultdict(list)
    for doc in documents:
        if doc.status != "indexed":
            continue
        text = doc.text or (
            f"{EXCHANGE_HEADER}{doc.session_id} on {doc.created_at[:16].replace('T', ' ')} "
            "(its text is kept in the graph's backend alone)"
        )
        for name in doc.names():
            texts[name].append(text)
    entities = []
    for entity in view.entities:
        if not entity.sources and entity.documents:
            found = [text for name in entity.documents for text in texts.get(name, [])]
            entity = GraphEntity(
                entity.name, entity.type, entity.descriptions, tuple(_latest(list(dict.fromkeys(found)))),
                entity.documents,
            )  # fmt: skip
        entities.append(entity)
    return GraphView(tuple(entities), view.relations, view.total, view.truncated)


def _hops_from(start: str, relations: Sequence[GraphRelation]) -> dict[str, int]:
    """How many relations away from `start` each entity it reaches is."""
    neighbours: dict[str, set[str]] = defaultdict(set)
    for relation in relations:
        neighbours[relation.source].add(relation.target)
        neighbours[relation.target].add(relation.source)
    hops, frontier = {start: 0}, [start]
    while frontier:
        reached = []
        for name in frontier:
            for other in neighbours[name]:
                if other not in hops:
                    hops[other] = hops[name] + 1
                    reached.append(other)
        frontier = reached
    return hops


def _latest(values: list[str]) -> list[str]:
    # LightRAG appends an entity's chunk ids and document names as it meets them again: the last are the latest.
    return values[-MAX_SOURCES_PER_ENTITY:]


def _joined(first: GraphEntity, second: GraphEntity) -> GraphEntity:
    return GraphEntity(
        first.name,
        first.type or second.type,
        tuple(dict.fromkeys(first.descriptions + second.descriptions)),
        tuple(dict.fromkeys(first.sources + second.sources)),
        tuple(dict.fromkeys(first.documents + second.documents)),
    )

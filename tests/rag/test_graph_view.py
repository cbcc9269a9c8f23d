"""Several chats' graphs drawn as one around an entity, and the names their searches found ranked as one list."""

from __future__ import annotations

from bot.rag.backend import GraphEntity, GraphRelation, GraphView
from bot.rag.graph_view import merged, ranked_names


def view_of_pairs(*pairs: tuple[str, str]) -> GraphView:
    names = list(dict.fromkeys(name for pair in pairs for name in pair))
    entities = tuple(GraphEntity(name, "concept", (f"{name} was mentioned",)) for name in names)
    relations = tuple(GraphRelation(a, b, f"{a} and {b} came up together", "") for a, b in pairs)
    return GraphView(entities, relations, len(entities))


def test_a_neighbourhood_keeps_the_entity_and_the_nearest_before_the_most_connected() -> None:
    # Zoe - Bruno - Carla, and Carla related to four more in another chat's graph: the most connected is far.
    first = view_of_pairs(("Zoe", "Bruno"), ("Bruno", "Carla"))
    second = view_of_pairs(("Carla", "Dina"), ("Carla", "Emil"), ("Carla", "Fred"), ("Carla", "Gina"))
    around = merged([first, second], 3, around="Zoe")
    assert {entity.name for entity in around.entities} == {"Zoe", "Bruno", "Carla"} and around.truncated
    assert {(r.source, r.target) for r in around.relations} == {("Zoe", "Bruno"), ("Bruno", "Carla")}
    # The whole graph drawn: the most connected, whoever they are near.
    whole = merged([first, second], 3)
    assert {entity.name for entity in whole.entities} == {"Carla", "Bruno", "Dina"} and whole.total == 7


def test_the_names_several_graphs_found_are_listed_once_the_best_first() -> None:
    found = [["Porto", "Oporto Bay", "Sporting Porto"], ["porto", "Porto", "Portobello"], []]
    # The name itself (case aside), then the names starting with it, then the others: those where it starts a
    # word before the rest, then the shortest.
    ranked = ["Porto", "porto", "Portobello", "Sporting Porto", "Oporto Bay"]
    assert ranked_names("porto", found, 10) == ranked
    assert ranked_names(" PORTO ", found, 3) == ranked[:3]

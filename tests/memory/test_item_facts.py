"""The facts table retrieval scores by is what the index database holds, after every kind of change: each
item's facts, the items just before and after a turn in its day file, and who speaks in the active items."""

from __future__ import annotations

import itertools
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bot.domain.memory import MemoryLayer
from bot.memory.item_storage import NO_ROW, ItemFacts
from bot.memory.items_store import MemoryItemStore
from bot.storage.jsonl import dumps_line
from bot.workspace import MemoryPaths
from tests.memory.helpers import item, write_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
E = MemoryLayer.EPISODIC
S = MemoryLayer.SEMANTIC


def in_database(store: MemoryItemStore) -> tuple[dict[str, ItemFacts], dict[str, list[str]]]:
    """Each row's facts and, for a day file's rows, the ids of the rows before and after it by position: read
    from the index database itself."""
    rows = store._db.connection.execute(
        "SELECT id, layer, active, day, speaker, updated, salience, confidence, day_file, file FROM items"
        " ORDER BY file, pos"
    ).fetchall()
    facts = {
        row[0]: ItemFacts(row[0], MemoryLayer(row[1]), bool(row[2]), date.fromordinal(row[3]), *row[4:8])
        for row in rows
    }
    around: dict[str, list[str]] = {row[0]: [] for row in rows}
    for before, after in itertools.pairwise(rows):
        if before[8] and before[9] == after[9]:
            around[before[0]].append(after[0])
            around[after[0]].insert(0, before[0])
    return facts, around


def assert_as_in_database(store: MemoryItemStore) -> None:
    facts, around = in_database(store)
    speaking = {row[0] for row in store._db.connection.execute("SELECT speaker FROM items WHERE active")}
    assert store.speakers_among(["Ann", "Bob", "Cy"]) == speaking & {"Ann", "Bob", "Cy"}
    ids = [*facts, "missing"]
    # The columns retrieval reads: one row per stored item, and which rows are active turns.
    table = store.facts_table
    rows = table.rows_of(ids)
    assert (
        rows[-1] == NO_ROW
        and len(set(rows[:-1].tolist())) == len(facts)
        and table.ids_at(rows[:-1].tolist()) == ids[:-1]
    )
    assert table.episodic_at(rows).tolist() == [
        item_id in facts and facts[item_id].active and facts[item_id].layer is E for item_id in ids
    ]
    assert store.facts_table.facts_of(ids) == facts
    assert store.facts_table.neighbour_ids(ids) == {**around, "missing": []}
    assert store.facts_table.episodic_neighbours(ids) == {
        **{
            item_id: [facts[other] for other in others if facts[other].active and facts[other].layer is E]
            for item_id, others in around.items()
        },
        "missing": [],
    }


def later(path: Path) -> None:
    """A distinct mtime even within one filesystem timestamp tick."""
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


async def test_the_facts_table_is_what_the_index_holds_after_every_kind_of_change(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    monday, tuesday = NOW, NOW + timedelta(days=1)
    write_items(
        paths.episodic_file(monday.date()),
        [item(E, f"Ann: turn {n} on monday", monday, item_id=f"m{n}", salience=0.1 * n) for n in range(1, 5)],
    )
    write_items(paths.episodic_file(tuesday.date()), [item(E, "Bob: turn on tuesday", tuesday, item_id="u1")])
    write_items(paths.semantic_file, [item(S, f"fact {n}", NOW, item_id=f"f{n}") for n in range(1, 3)])
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    assert len(in_database(store)[0]) == 7
    assert_as_in_database(store)

    # New items at the end of their files, and an item stored before moved to the end of another day's file.
    store.append([item(E, "Ann: turn 5 on monday", monday, item_id="m5"), item(S, "fact 3", NOW, item_id="f3")])
    assert_as_in_database(store)
    store.append([item(E, "Ann: turn 2, said again on tuesday", tuesday, item_id="m2")])
    assert store.facts_table.neighbour_ids(["m1", "m2"]) == {"m1": ["m3"], "m2": ["u1"]}
    assert_as_in_database(store)

    # Changed in place (a superseded turn is no longer an active neighbour), moved to another layer, removed.
    stored = store.get("m3")
    assert stored is not None
    store.replace([stored.model_copy(update={"superseded_by": "m5", "salience": 0.9})])
    assert_as_in_database(store)
    fact = store.get("f1")
    assert fact is not None
    store.relocate(fact.model_copy(update={"layer": E}))
    assert_as_in_database(store)
    store.remove(["m4", "f2"])
    assert_as_in_database(store)
    # New items take the rows the removed ones left.
    store.append([item(E, "Ann: turn 6 on monday", monday, item_id="m6"), item(S, "fact 4", NOW, item_id="f4")])
    assert_as_in_database(store)
    await store.flush()

    # A hand edit of a day file (a turn added at its start), then a day file deleted.
    monday_file = paths.episodic_file(monday.date())
    lines = monday_file.read_text().splitlines(keepends=True)
    written = item(E, "Ann: a turn written by hand", monday, item_id="h1")
    monday_file.write_text(dumps_line(written.to_json_dict()) + "\n" + "".join(lines))
    later(monday_file)
    assert store.refresh_sync()
    assert store.facts_table.neighbour_ids(["h1"]) == {"h1": ["m1"]}
    assert_as_in_database(store)
    paths.episodic_file(tuesday.date()).unlink()
    assert store.refresh_sync()
    assert "u1" not in store.facts_table.facts_of(["u1"])
    assert_as_in_database(store)

    # A restart loads the table from the index as the changes left it.
    expected = in_database(store)
    store.close()
    again = MemoryItemStore(paths, UTC)
    again.refresh_sync()
    assert again.files_read == 0
    assert in_database(again) == expected
    assert_as_in_database(again)

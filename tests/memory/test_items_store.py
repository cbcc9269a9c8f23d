"""The JSONL files are the truth: hand edits, deletions and torn lines are picked up; rewrites are atomic."""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.context.estimator import TokenEstimator
from bot.domain.memory import LiveConversation, MemoryItem, MemoryLayer, MemoryQuery
from bot.memory.index_database import INDEX_FILE_NAME
from bot.memory.item_caches import ITEM_CACHE_SIZE
from bot.memory.item_storage import ItemFacts
from bot.memory.items_store import MemoryItemStore
from bot.memory.lexical_index import Bm25Index
from bot.memory.prompt_pack import MemoryPromptPackService
from bot.memory.retrieval import (
    RECHECKED_MESSAGES,
    LiveCoverage,
    MemoryRetrievalService,
    RankedItem,
    WorkingSet,
    ranked_by_score,
)
from bot.memory.vector_index import VectorIndex
from bot.storage.folder_changes import FolderChanges
from bot.workspace import MemoryPaths
from tests.memory.helpers import item, read_items, write_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = MemoryLayer.SEMANTIC


def touch_later(path: Path) -> None:
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def loaded(tmp_path: Path) -> tuple[MemoryItemStore, Bm25Index, MemoryPaths]:
    paths = MemoryPaths(tmp_path)
    store = MemoryItemStore(paths, UTC)
    index = Bm25Index()
    store.subscribe(index)
    store.refresh_sync()
    return store, index, paths


def test_a_hand_edited_line_replaces_the_item_in_the_store_and_the_index(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The dog is called Rex.", NOW, item_id="m1")])
    store, index, _ = loaded(tmp_path)
    assert list(index.search("rex", 5)) == ["m1"]

    paths.semantic_file.write_text(paths.semantic_file.read_text().replace("Rex", "Bolt"))
    touch_later(paths.semantic_file)
    assert store.refresh_sync()
    stored = store.get("m1")
    assert stored is not None and stored.content == "The dog is called Bolt."
    assert index.search("rex", 5) == {} and list(index.search("bolt", 5)) == ["m1"]


def test_deleted_lines_and_files_disappear(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "one fact", NOW, item_id="m1"), item(S, "two fact", NOW, item_id="m2")])
    write_items(paths.procedural_file, [item(MemoryLayer.PROCEDURAL, "run make", NOW, item_id="m3")])
    store, index, _ = loaded(tmp_path)
    assert len(store) == 3

    paths.semantic_file.write_text(paths.semantic_file.read_text().splitlines()[1] + "\n")
    touch_later(paths.semantic_file)
    paths.procedural_file.unlink()
    store.refresh_sync()
    assert [i.id for i in store.items()] == ["m2"]
    assert index.search("fact make", 5).keys() == {"m2"}


def test_unreadable_and_torn_lines_are_skipped(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "good one", NOW, item_id="m1")])
    with paths.semantic_file.open("a") as handle:
        handle.write('{"not": "an item"}\nnot json at all\n{"id": "m2", "layer": "SEMANTIC", "ty')
    store, _, _ = loaded(tmp_path)
    assert [i.id for i in store.items()] == ["m1"]


async def test_rewrites_keep_unknown_keys_and_leave_no_temp_files(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "kept", NOW, item_id="m1", myNote="by hand")])
    store, _, _ = loaded(tmp_path)
    stored = store.get("m1")
    assert stored is not None
    store.replace([stored.model_copy(update={"pinned": True})])
    await store.flush()
    [record] = read_items(paths.semantic_file)
    assert record["pinned"] is True and record["myNote"] == "by hand"
    assert [p.name for p in paths.items_dir.iterdir()] == ["semantic.jsonl"]


async def test_a_hand_edit_made_before_an_append_is_kept(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "first", NOW, item_id="m1")])
    store, _, _ = loaded(tmp_path)
    write_items(paths.semantic_file, [item(S, "added by hand", NOW, item_id="m2")])
    touch_later(paths.semantic_file)
    store.refresh_sync()
    store.append([item(S, "added by the bot", NOW, item_id="m3")])
    await store.flush()
    assert [r["id"] for r in read_items(paths.semantic_file)] == ["m1", "m2", "m3"]


def test_retrieval_reads_each_items_facts_and_neighbours_from_the_index_as_parsing_it_would_give(
    tmp_path: Path,
) -> None:
    zone = ZoneInfo("America/New_York")
    paths = MemoryPaths(tmp_path)
    late = datetime(2026, 3, 2, 3, 30, tzinfo=UTC)  # still March 1st in New York
    turns = [
        item(MemoryLayer.EPISODIC, f"Ann: turn {n} about the boat", late, item_id=f"t{n}", salience=0.1 * n)
        for n in range(1, 4)
    ]
    write_items(paths.episodic_file(late.astimezone(zone).date()), turns)
    # A hand-written line: no zone on its time (read in the bot's), and an older version of a superseded fact.
    with paths.semantic_file.open("a") as handle:
        handle.write('{"id": "f1", "layer": "SEMANTIC", "type": "fact", "content": "Bob: the boat is blue",')
        handle.write(' "createdAt": "2026-03-01T23:30:00", "updatedAt": "2026-03-01T23:30:00", "confidence": 0.7}\n')
    write_items(paths.semantic_file, [item(S, "the boat is red", NOW, item_id="f0", superseded_by="f1")])
    store = MemoryItemStore(paths, zone)
    store.refresh_sync()

    facts = store.facts_table.facts_of(["f1", "t2", "missing", "f0", "t1"])
    assert list(facts) == ["f1", "t2", "f0", "t1"]
    for item_id, fact in facts.items():
        parsed = store.get(item_id)
        assert parsed is not None
        assert fact == ItemFacts(
            item_id,
            parsed.layer,
            parsed.active,
            parsed.created_at.astimezone(zone).date(),
            parsed.speaker,
            parsed.updated_at.timestamp(),
            parsed.salience,
            parsed.confidence,
        )
    assert facts["t1"].day == date(2026, 3, 1) and facts["f1"].day == date(2026, 3, 1)
    assert facts["f1"].speaker == "Bob" and not facts["f0"].active

    assert store.facts_table.neighbour_ids(["t2", "t1", "t3", "f1"]) == {
        "t2": ["t1", "t3"],
        "t1": ["t2"],
        "t3": ["t2"],
        "f1": [],
    }
    store.remove(["t2"])  # a change: what was read before is read again
    assert store.facts_table.neighbour_ids(["t1"]) == {"t1": ["t3"]} and "t2" not in store.facts_table.facts_of(["t2"])


def test_an_index_lost_while_the_store_was_closed_is_filled_from_the_files_again(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The boat is called Marlin.", NOW, item_id="m1")])
    store, index, _ = loaded(tmp_path)
    store.close()
    database = paths.index_dir / INDEX_FILE_NAME
    for path in database.parent.glob(f"{INDEX_FILE_NAME}*"):
        if not path.name.endswith(".lock"):
            path.unlink()

    store.refresh_sync()
    assert len(store) == 1 and [entry.id for entry in store.items()] == ["m1"]
    assert list(index.search("marlin", 5)) == ["m1"]
    assert store.files_read == 2


def test_items_already_parsed_are_returned_even_when_reading_the_others_pushes_them_out_of_the_cache(
    tmp_path: Path,
) -> None:
    paths = MemoryPaths(tmp_path)
    count = ITEM_CACHE_SIZE + 50
    write_items(paths.semantic_file, [item(S, f"fact number {n}", NOW, item_id=f"f{n}") for n in range(count)])
    store, _, _ = loaded(tmp_path)
    parsed_first = [f"f{n}" for n in range(10)]
    assert list(store.get_many(parsed_first)) == parsed_first
    # The ten come first and are cached; the others, parsed now, fill the cache past its size.
    wanted = parsed_first + [f"f{n}" for n in range(10, count)]
    found = store.get_many(wanted)
    assert list(found) == wanted and all(found[item_id].id == item_id for item_id in wanted)


async def test_a_parsed_item_kept_for_the_next_packs_is_read_anew_after_a_hand_edit_a_supersede_and_a_forget(
    tmp_path: Path,
) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(paths.semantic_file, [item(S, "The dog is called Rex.", NOW, item_id="m1")])
    store, _, _ = loaded(tmp_path)
    pack = MemoryPromptPackService(TokenEstimator(), UTC)

    def offered(item_id: str) -> list[RankedItem]:
        return ranked_by_score([(store.facts_table.facts_of([item_id])[item_id], 1.0)], NOW.timestamp())

    def packed(ranked: list[RankedItem]) -> str:
        return pack.build(ranked, store.get_many, len(ranked), 200, 400).rendered

    first = offered("m1")
    assert packed(first) == "## Facts and Preferences\n- The dog is called Rex."  # parsed, and kept
    paths.semantic_file.write_text(paths.semantic_file.read_text().replace("Rex", "Bolt"))
    touch_later(paths.semantic_file)
    store.refresh_sync()
    assert packed(first) == "## Facts and Preferences\n- The dog is called Bolt."

    old = store.get("m1")
    assert old is not None
    store.append([item(S, "The dog is called Max.", NOW, item_id="m2")])
    store.replace([old.model_copy(update={"superseded_by": "m2"})])
    await store.flush()
    superseded = store.get_many(["m1"])["m1"]
    assert superseded.superseded_by == "m2" and not superseded.active
    newer = offered("m2")
    assert packed(newer) == "## Facts and Preferences\n- The dog is called Max."

    store.remove(["m2"])  # forgotten after it was ranked: the pack passes over it
    assert packed(newer) == "" and store.get_many(["m1", "m2"]).keys() == {"m1"}
    await store.flush()
    assert "Max" not in paths.semantic_file.read_text()


def test_facts_and_neighbours_follow_appends_and_changes_without_a_query(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    turns = [item(MemoryLayer.EPISODIC, f"turn {n} about the boat", NOW, item_id=f"t{n}") for n in range(1, 4)]
    write_items(paths.episodic_file(NOW.date()), turns)
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    assert store.facts_table.neighbour_ids(["t1", "t2", "t3"]) == {"t1": ["t2"], "t2": ["t1", "t3"], "t3": ["t2"]}
    queries: list[str] = []
    store._db.connection.set_trace_callback(queries.append)

    store.append([item(MemoryLayer.EPISODIC, "turn 4 about the boat", NOW, item_id="t4")])  # after t3 in its file
    queries.clear()
    around = store.facts_table.neighbour_ids(["t1", "t2", "t3", "t4"])

    assert around == {"t1": ["t2"], "t2": ["t1", "t3"], "t3": ["t2", "t4"], "t4": ["t3"]}
    assert list(store.facts_table.facts_of(["t4", "t1"])) == ["t4", "t1"]
    assert queries == []  # the facts table answers: no query per message

    def episodic_neighbours() -> dict[str, list[str]]:
        found = store.facts_table.episodic_neighbours(["t2", "t3", "t4"])
        return {item_id: [facts.id for facts in others] for item_id, others in found.items()}

    assert episodic_neighbours() == {"t2": ["t1", "t3"], "t3": ["t2", "t4"], "t4": ["t3"]}
    store.append([item(MemoryLayer.EPISODIC, "turn 5 about the boat", NOW, item_id="t5")])
    assert episodic_neighbours() == {"t2": ["t1", "t3"], "t3": ["t2", "t4"], "t4": ["t3", "t5"]}
    store.replace([turns[0].model_copy(update={"superseded_by": "t5"})])  # no longer active: not a neighbour
    assert episodic_neighbours() == {"t2": ["t3"], "t3": ["t2", "t4"], "t4": ["t3", "t5"]}


def test_the_pinned_and_core_items_are_read_again_only_when_they_may_have_changed(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path)
    write_items(
        paths.semantic_file,
        [
            item(S, "Always answer in French.", NOW, item_id="rule", pinned=True),
            item(S, "The user is called Ada.", NOW, item_id="name", salience=0.9),
        ],
    )
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    reads: list[str] = []
    store._db.connection.set_trace_callback(
        lambda sql: reads.append(sql) if "pinned ORDER" in sql or "core ORDER" in sql else None
    )

    def chosen() -> tuple[list[str], list[str]]:
        return [found.id for found in store.pinned()], [found.id for found in store.core(4)]

    assert chosen() == (["rule"], ["name"])
    for turn in range(3):  # a turn's own items: neither pinned nor salient enough
        store.append([item(MemoryLayer.EPISODIC, f"turn {turn}", NOW, item_id=f"t{turn}")])
        store.append([item(S, f"a passing fact {turn}", NOW, item_id=f"f{turn}")])
        assert chosen() == (["rule"], ["name"])
    assert len(reads) == 2
    store.append([item(S, "Never call before nine.", NOW, item_id="rule2", pinned=True)])
    store.append([item(S, "The user lives in Lyon.", NOW + timedelta(minutes=1), item_id="city", salience=0.95)])
    assert chosen() == (["rule", "rule2"], ["city", "name"])
    store.replace([item(S, "The user is called Ada.", NOW, item_id="name", salience=0.9, superseded_by="f0")])
    assert chosen() == (["rule", "rule2"], ["city"])
    assert len(reads) == 6


def test_the_items_referring_to_the_live_conversation_are_found_from_either_side(tmp_path: Path) -> None:
    """Few candidates and a long conversation, or the other way round: the same items are left out."""
    paths = MemoryPaths(tmp_path)
    turns = [
        item(MemoryLayer.EPISODIC, f"turn {n}", NOW, item_id=f"t{n}", references=[f"u{n}", f"a{n}"]) for n in range(6)
    ]
    write_items(paths.episodic_file(NOW.date()), turns)
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    candidates = ["t1", "t2", "t4"]
    long_conversation = {f"u{n}" for n in range(3, 6)} | {f"x{n}" for n in range(100)}
    short_conversation = {"a2"}

    assert store.referring_among(candidates, long_conversation) == {"t4"}
    assert store.referring_among(candidates, short_conversation) == {"t2"}
    assert store.referring_among(candidates, set()) == set()


def messages_looked_up(queries: list[str]) -> set[str]:
    """The message ids (u0, a0 ...) the queries of `refs` asked for."""
    return {found for sql in queries if "FROM refs" in sql for found in re.findall(r"'([ua]\d+)'", sql)}


def with_an_earlier_exchange(tmp_path: Path) -> tuple[MemoryItemStore, MemoryItem]:
    """A store holding one exchange of an hour ago (before any live conversation of the test)."""
    paths = MemoryPaths(tmp_path)
    earlier = item(MemoryLayer.EPISODIC, "an earlier exchange", NOW - timedelta(hours=1), item_id="e0")
    write_items(paths.episodic_file(NOW.date()), [earlier])
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    return store, earlier


def test_the_live_coverage_looks_up_the_new_messages_and_follows_the_items_added(tmp_path: Path) -> None:
    store, earlier = with_an_earlier_exchange(tmp_path)
    coverage = LiveCoverage(store)
    ids: set[str] = set()
    in_order: list[str] = []
    live = LiveConversation(ids, in_order)
    queries: list[str] = []
    store._db.connection.set_trace_callback(queries.append)

    def covered() -> tuple[set[str], int]:
        queries.clear()
        found = coverage.items_of(live)
        return found, len(messages_looked_up(queries))

    for turn in range(12):
        ids.update((f"u{turn}", f"a{turn}"))
        in_order += [f"u{turn}", f"a{turn}"]
        found, looked_up = covered()
        assert found == {f"t{n}" for n in range(turn)} and looked_up == 2  # the two new messages only
        at = NOW + timedelta(minutes=turn)
        store.append(
            [item(MemoryLayer.EPISODIC, f"turn {turn}", at, item_id=f"t{turn}", references=[f"u{turn}", f"a{turn}"])]
        )
    store.append([item(S, "a fact said at the start", NOW, item_id="fact", references=["u0"])])
    found, looked_up = covered()
    assert found == {f"t{n}" for n in range(12)} | {"fact"} and looked_up == 0
    store.replace([earlier.model_copy(update={"superseded_by": "fact"})])  # not an append: the newest looked up again
    store.append([item(MemoryLayer.EPISODIC, "turn 11 again", NOW, item_id="t11b", references=["a11"])])
    found, looked_up = covered()
    assert "t11b" in found and looked_up == RECHECKED_MESSAGES


def test_the_working_set_passes_over_the_live_conversations_own_items_as_it_grows(tmp_path: Path) -> None:
    """Each turn's item is written after the turn; the next message's working set still leaves it out,
    while the turns of before the live conversation (or of another chat) come in."""
    store, _ = with_an_earlier_exchange(tmp_path)
    coverage = LiveCoverage(store)
    ids: set[str] = set()
    in_order: list[str] = []
    queries: list[str] = []
    store._db.connection.set_trace_callback(queries.append)
    for turn in range(30):
        ids.update((f"u{turn}", f"a{turn}"))
        in_order += [f"u{turn}", f"a{turn}"]
        queries.clear()
        covered = coverage.items_of(LiveConversation(ids, in_order))
        looked_up = len(messages_looked_up(queries))
        assert looked_up <= RECHECKED_MESSAGES + 2  # the two new messages and the newest few again
        queries.clear()
        working = store.recent_episodic(3, NOW - timedelta(days=7), covered.__contains__)
        assert [found.id for found in working] == ["e0"]
        at = NOW + timedelta(minutes=turn)
        store.append(
            [item(MemoryLayer.EPISODIC, f"turn {turn}", at, item_id=f"t{turn}", references=[f"u{turn}", f"a{turn}"])]
        )
    referring = [sql for sql in queries if "FROM refs" in sql]
    assert not referring  # the coverage was looked up before; the scan itself reads ids only


def test_the_working_set_kept_per_conversation_is_what_reading_it_again_would_give(tmp_path: Path) -> None:
    """Message by message, the kept working set equals a full read: while only the conversation's own
    turns are added it reads nothing; another chat's turn, a changed item or the window moving on are
    each seen at once."""
    paths = MemoryPaths(tmp_path)
    earliest = item(
        MemoryLayer.EPISODIC, "about to leave the window", NOW - timedelta(days=7, minutes=-3), item_id="e1"
    )
    earlier = item(MemoryLayer.EPISODIC, "an earlier exchange", NOW - timedelta(hours=1), item_id="e0")
    write_items(paths.episodic_file(earliest.created_at.date()), [earliest])
    write_items(paths.episodic_file(NOW.date()), [earlier])
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    coverage, working_set = LiveCoverage(store), WorkingSet(store)
    ids: set[str] = set()
    in_order: list[str] = []
    scans: list[str] = []
    store._db.connection.set_trace_callback(lambda sql: scans.append(sql) if "ORDER BY file DESC" in sql else None)
    seen: list[list[str]] = []
    for turn in range(16):
        ids.update((f"u{turn}", f"a{turn}"))
        in_order += [f"u{turn}", f"a{turn}"]
        live = LiveConversation(ids, in_order)
        covered = coverage.items_of(live)
        since = NOW + timedelta(minutes=turn) - timedelta(days=7)
        scans.clear()
        kept = [found.id for found in working_set.of(live, 3, since, covered.__contains__)]
        if turn in (1, 2, 3, 4, 7, 8, 9, 12, 13, 14):
            assert not scans  # read from what was kept
        assert kept == [found.id for found in store.recent_episodic(3, since, covered.__contains__)]
        seen.append(kept)
        at = NOW + timedelta(minutes=turn)
        own = item(MemoryLayer.EPISODIC, f"turn {turn}", at, item_id=f"t{turn}", references=[f"u{turn}", f"a{turn}"])
        store.append([own])
        if turn == 5:  # another chat's turn, in the same memory
            store.append([item(MemoryLayer.EPISODIC, "in the other chat", at, item_id="x5", references=["y5"])])
        if turn == 10:  # the earlier exchange is superseded
            store.replace([earlier.model_copy(update={"superseded_by": "x5"})])
    assert seen[0] == seen[3] == ["e0", "e1"]
    assert seen[4] == ["e0"]  # e1 has left the seven days
    assert seen[6] == ["x5", "e0"]
    assert seen[11] == ["x5"]
    covered = coverage.items_of(live)
    # A window made wider reaches back further than what was found: read again.
    wider = since - timedelta(days=1)
    assert [found.id for found in working_set.of(live, 3, wider, covered.__contains__)] == ["x5", "e1"]
    # What `skip` passes over now is left out even when it was found before (the set is read again).
    assert working_set.of(live, 3, since, lambda item_id: item_id in covered or item_id == "x5") == []


def retrieval_over(paths: MemoryPaths) -> tuple[MemoryItemStore, MemoryRetrievalService]:
    """The scope's store, loaded, with retrieval over it as the bot makes them (lexical and vector indexes)."""
    store = MemoryItemStore(paths, UTC)
    lexical, vectors = Bm25Index(), VectorIndex(store.get_many)
    store.subscribe(lexical)
    store.subscribe(vectors)
    store.refresh_sync()
    return store, MemoryRetrievalService(store, lexical, vectors, UTC)


def test_retrieval_leaves_out_every_candidate_that_refers_to_the_live_conversation(tmp_path: Path) -> None:
    """The conversation's own turns (known to its coverage) and an item made later that refers to one of
    its older messages (a fact reinforced, which the coverage does not see) are both left out; an
    earlier exchange on the same topic is not."""
    paths = MemoryPaths(tmp_path)
    write_items(
        paths.episodic_file(NOW.date()),
        [item(MemoryLayer.EPISODIC, "tomatoes in the garden, an earlier talk", NOW - timedelta(days=2), item_id="old")],
    )
    store, retrieval = retrieval_over(paths)
    ids: set[str] = set()
    in_order: list[str] = []
    live = LiveConversation(ids, in_order)

    def ranked_ids(text: str) -> set[str]:
        query = MemoryQuery(text=text, session_id="s", now=NOW + timedelta(hours=1), working_top_k=0, live=live)
        return {entry.item_id for entry in retrieval.retrieve(query).ranked}

    for turn in range(8):  # past `RECHECKED_MESSAGES`: u0 is no longer looked up again
        ids.update((f"u{turn}", f"a{turn}"))
        in_order += [f"u{turn}", f"a{turn}"]
        ranked_ids("tomatoes")  # the coverage grows with the conversation, as message by message
        store.append(
            [
                item(
                    MemoryLayer.EPISODIC,
                    f"tomatoes in the garden, turn {turn}",
                    NOW + timedelta(minutes=turn),
                    item_id=f"t{turn}",
                    references=[f"u{turn}", f"a{turn}"],
                )
            ]
        )
    store.append([item(MemoryLayer.SEMANTIC, "the garden has tomatoes", NOW, item_id="fact", references=["u0"])])

    assert ranked_ids("tomatoes garden") == {"old"}


def test_an_earlier_turn_next_to_the_live_conversation_is_still_ranked_through_its_neighbour(tmp_path: Path) -> None:
    """Every word match is the live conversation's own; the turn just before it in the day file is not, and
    the first live turn's match lifts it: scoring is skipped only when nothing outside the conversation
    would be ranked."""
    paths = MemoryPaths(tmp_path)
    before = item(MemoryLayer.EPISODIC, "we planned the trip", NOW - timedelta(minutes=10), item_id="before")
    write_items(paths.episodic_file(NOW.date()), [before])
    store, retrieval = retrieval_over(paths)
    ids: set[str] = set()
    in_order: list[str] = []
    for turn in range(3):
        ids.update((f"u{turn}", f"a{turn}"))
        in_order += [f"u{turn}", f"a{turn}"]
        at = NOW + timedelta(minutes=turn)
        store.append(
            [
                item(
                    MemoryLayer.EPISODIC,
                    f"tomatoes, turn {turn}",
                    at,
                    item_id=f"t{turn}",
                    references=[f"u{turn}", f"a{turn}"],
                )
            ]
        )
    live = LiveConversation(ids, in_order)

    def ranked(text: str) -> list[str]:
        query = MemoryQuery(text=text, session_id="s", now=NOW + timedelta(hours=1), working_top_k=0, live=live)
        return [entry.item_id for entry in retrieval.retrieve(query).ranked]

    assert ranked("tomatoes") == ["before"]
    store.replace([before.model_copy(update={"superseded_by": "t0"})])
    assert ranked("tomatoes") == []


def test_explain_gives_the_ranking_of_retrieve_with_each_relevance_in_its_parts(tmp_path: Path) -> None:
    """What the console shows for a search: the order `retrieve` makes, and each relevance as its lexical
    match, its dense match and its lifts (an answer that shares no word is lifted by its question)."""
    paths = MemoryPaths(tmp_path)
    day = NOW - timedelta(days=1)
    write_items(
        paths.episodic_file(day.date()),
        [
            item(MemoryLayer.EPISODIC, "we planned the trip to Lisbon", day, item_id="question"),
            item(MemoryLayer.EPISODIC, "sounds good, see you then", day + timedelta(minutes=1), item_id="answer"),
        ],
    )
    write_items(paths.semantic_file, [item(MemoryLayer.SEMANTIC, "the trip is in May", NOW, item_id="fact")])
    _, retrieval = retrieval_over(paths)
    query = MemoryQuery(text="trip to Lisbon", session_id="s", now=NOW, working_top_k=0)
    explained = retrieval.explain(query)
    assert [parts.ranked.item_id for parts in explained] == [
        entry.item_id for entry in retrieval.retrieve(query).ranked
    ]
    by_id = {parts.ranked.item_id: parts for parts in explained}
    for parts in explained:
        assert parts.dense == 0.0  # no vectors: lexical only
        assert abs(parts.lexical + parts.dense + parts.lifts - parts.ranked.relevance) < 1e-9
    assert by_id["question"].lexical > by_id["fact"].lexical > 0
    assert by_id["answer"].lexical == 0.0 and by_id["answer"].lifts > 0


def test_hand_edits_are_seen_on_the_next_check_whatever_the_way_files_are_checked(tmp_path: Path) -> None:
    """With the folders' events (`FolderChanges`) or a `stat` of every file, the same edits are seen at
    once: an old day file edited in place (same size), a day file deleted, one added, the semantic file
    replaced by an editor's rename."""
    watched, scanned = tmp_path / "watched", tmp_path / "scanned"
    changes = FolderChanges()
    stores = []
    for root, folder_changes in ((watched, changes), (scanned, None)):
        paths = MemoryPaths(root)
        for day in range(30):
            at = NOW - timedelta(days=day)
            write_items(
                paths.episodic_file(at.date()), [item(MemoryLayer.EPISODIC, f"day {day:02}", at, item_id=f"d{day}")]
            )
        write_items(paths.semantic_file, [item(MemoryLayer.SEMANTIC, "likes tea", NOW, item_id="s1")])
        store = MemoryItemStore(paths, UTC, changes=folder_changes)
        store.refresh_sync()
        assert not store.refresh_sync()  # nothing changed
        stores.append((paths, store))

    for paths, store in stores:
        old_file = paths.episodic_file((NOW - timedelta(days=20)).date())
        old_file.write_bytes(old_file.read_bytes().replace(b"day 20", b"day XX"))
        paths.episodic_file((NOW - timedelta(days=10)).date()).unlink()
        new_day = NOW - timedelta(days=400)
        write_items(
            paths.episodic_file(new_day.date()), [item(MemoryLayer.EPISODIC, "long ago", new_day, item_id="n1")]
        )
        replacement = paths.items_dir / ".semantic.jsonl.tmp"
        write_items(replacement, [item(MemoryLayer.SEMANTIC, "likes coffee", NOW, item_id="s1")])
        os.replace(replacement, paths.semantic_file)

        assert store.refresh_sync()
        got = store.get_many(["d20", "d10", "n1", "s1"])
        assert got["d20"].content == "day XX" and "d10" not in got
        assert got["n1"].content == "long ago" and got["s1"].content == "likes coffee"
        assert len(store) == 31 and not store.refresh_sync()  # 30 days and a fact, one day gone, one come
    changes.close()


def test_a_check_that_failed_leaves_the_next_one_to_look_at_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check reads the folders' events once; when it fails halfway (a file that cannot be read), the
    next check does not trust the events it took but looks at every file again."""
    paths = MemoryPaths(tmp_path)
    write_items(paths.episodic_file(NOW.date()), [item(MemoryLayer.EPISODIC, "today", NOW, item_id="d0")])
    changes = FolderChanges()
    store = MemoryItemStore(paths, UTC, changes=changes)
    store.refresh_sync()
    assert not store.refresh_sync()
    earlier = NOW - timedelta(days=3)
    write_items(paths.episodic_file(earlier.date()), [item(MemoryLayer.EPISODIC, "earlier", earlier, item_id="d3")])

    def unreadable(path: Path, signature: object) -> None:
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(store._reconciler, "_load_file", unreadable)
    with pytest.raises(OSError):
        store.refresh_sync()
    monkeypatch.undo()
    assert store.refresh_sync()
    assert store.get("d3") is not None
    changes.close()

"""Structured writes: turns, extraction, dedup, supersede, promotion, decay, pins and forgetting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.domain.memory import MemoryLayer, TurnMemoryEvent
from bot.memory.extraction import MemoryCandidate, RuleBasedExtractor
from bot.memory.items_store import MemoryItemStore
from bot.memory.write_service import MemoryWriteService, UnknownMemoryItem
from bot.settings import MemoryConfig
from bot.workspace import MemoryPaths
from tests.memory.helpers import read_items

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def paths(tmp_path: Path) -> MemoryPaths:
    return MemoryPaths(tmp_path / "memory")


@pytest.fixture
def store(paths: MemoryPaths) -> MemoryItemStore:
    return MemoryItemStore(paths, UTC)


async def say_turn(
    store: MemoryItemStore,
    user: str,
    assistant: str = "Noted.",
    at: datetime = NOW,
    ids: tuple[str, str] = ("u1", "a1"),
    **config: object,
) -> None:
    event = TurnMemoryEvent("telegram:1", user, assistant, at, *ids)
    candidates = RuleBasedExtractor().extract(event, code_aware=True)
    MemoryWriteService(store).record_turn(event, candidates, MemoryConfig(**config))  # type: ignore[arg-type]
    await store.flush()


async def test_a_turn_becomes_an_episodic_item_with_the_contract_fields(
    store: MemoryItemStore, paths: MemoryPaths
) -> None:
    await say_turn(store, "what's the weather?", "Sunny.")
    [record] = read_items(paths.episodic_file(NOW.date()))
    assert {
        "id", "layer", "type", "content", "createdAt", "updatedAt", "confidence", "salience", "tags",
        "references", "fingerprint", "source",
    } <= record.keys()  # fmt: skip
    assert record["layer"] == "EPISODIC" and record["type"] == "turn"
    assert record["content"] == "User: what's the weather? | Assistant: Sunny."
    assert record["source"] == "telegram:1" and record["references"] == ["u1", "a1"]


async def test_durable_statements_become_semantic_items(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(
        store, "My name is Ann. I prefer short answers. Never call me before 9am. We decided to use Postgres."
    )
    semantic = {(r["type"], r["content"]) for r in read_items(paths.semantic_file)}
    assert semantic == {
        ("identity", "My name is Ann."),
        ("preference", "I prefer short answers."),
        ("constraint", "Never call me before 9am."),
        ("decision", "We decided to use Postgres."),
    }


async def test_the_same_fact_twice_is_one_item_with_raised_confidence(
    store: MemoryItemStore, paths: MemoryPaths
) -> None:
    await say_turn(store, "Remember that the spare key is under the mat.")
    await say_turn(store, "remember: the spare key is under the mat", at=NOW + timedelta(hours=1))
    [record] = read_items(paths.semantic_file)
    assert record["content"] == "the spare key is under the mat."
    assert record["confidence"] == pytest.approx(0.95)
    assert record["updatedAt"].startswith("2026-03-01T13:00")


async def test_a_newer_contradicting_fact_supersedes_the_older(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(store, "My favourite colour is green.")
    await say_turn(store, "My favourite colour is blue.", at=NOW + timedelta(days=1))
    old, new = read_items(paths.semantic_file)
    assert old["content"] == "My favourite colour is green." and old["supersededBy"] == new["id"]
    assert new["content"] == "My favourite colour is blue." and "supersededBy" not in new
    assert [item.content for item in store.in_layer(MemoryLayer.SEMANTIC)] == ["My favourite colour is blue."]


async def test_retracting_an_exchange_takes_back_what_it_wrote(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(store, "My favourite colour is green. Remember that the spare key is under the mat.")
    later = NOW + timedelta(days=1)
    await say_turn(
        store, "My favourite colour is blue. remember: the spare key is under the mat", at=later, ids=("u2", "a2")
    )
    report = MemoryWriteService(store).retract(["u2", "a2"])  # /retry or /undo dropped the second exchange
    await store.flush()
    assert sorted(item.content for item in report.added) == [
        "My favourite colour is blue.",
        "User: My favourite colour is blue. remember: the spare key is under the mat | Assistant: Noted.",
    ]
    green, key = sorted(read_items(paths.semantic_file), key=lambda record: str(record["content"]))
    assert green["content"] == "My favourite colour is green." and "supersededBy" not in green  # current again
    assert key["content"] == "the spare key is under the mat."
    assert key["references"] == ["u1", "a1"] and key["confidence"] == pytest.approx(0.8)  # its reinforcement undone
    assert [item.content for item in store.in_layer(MemoryLayer.EPISODIC)] == [
        "User: My favourite colour is green. Remember that the spare key is under the mat. | Assistant: Noted."
    ]


async def test_a_repeated_episodic_fact_is_promoted_to_semantic(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(store, "I live in Lisbon.")
    facts = [r for r in read_items(paths.episodic_file(NOW.date())) if r["type"] == "fact"]
    assert [(f["content"], f["confidence"]) for f in facts] == [("I live in Lisbon.", 0.6)]
    assert not paths.semantic_file.exists()

    later = NOW + timedelta(days=3)
    await say_turn(store, "I live in Lisbon.", at=later)
    assert [r["type"] for r in read_items(paths.episodic_file(NOW.date()))] == ["turn"]
    [promoted] = read_items(paths.semantic_file)
    assert promoted["id"] == facts[0]["id"] and promoted["layer"] == "SEMANTIC"
    assert promoted["confidence"] == pytest.approx(0.75) and "promoted" in promoted["tags"]


async def test_promotion_can_be_switched_off(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(store, "I live in Lisbon.", promotion_enabled=False)
    await say_turn(store, "I live in Lisbon.", promotion_enabled=False)
    assert not paths.semantic_file.exists()


async def test_salience_decays_after_decay_days_without_use(store: MemoryItemStore, paths: MemoryPaths) -> None:
    await say_turn(store, "Remember that the boiler code is 1234.")
    [before] = read_items(paths.semantic_file)
    writer = MemoryWriteService(store)
    config = MemoryConfig(decay_days=30)
    assert writer.decay(NOW + timedelta(days=29), config, {}) == 0
    assert writer.decay(NOW + timedelta(days=31), config, {}) == 2  # the fact and the turn
    assert writer.decay(NOW + timedelta(days=32), config, {}) == 0  # at most once per period
    await store.flush()
    [after] = read_items(paths.semantic_file)
    assert after["salience"] == pytest.approx(before["salience"] / 2)
    # An item used recently does not decay, and the use is recorded.
    assert writer.decay(NOW + timedelta(days=70), config, {after["id"]: NOW + timedelta(days=60)}) == 1  # the turn
    await store.flush()
    [used] = read_items(paths.semantic_file)
    assert used["lastAccessedAt"].startswith("2026-04-30") and used["salience"] == after["salience"]
    assert writer.decay(NOW + timedelta(days=70), MemoryConfig(decay_enabled=False), {}) == 0


async def test_forget_removes_the_item_from_its_file_and_the_indexes(
    store: MemoryItemStore, paths: MemoryPaths
) -> None:
    await say_turn(store, "Remember that I am allergic to nuts.")
    [record] = read_items(paths.semantic_file)
    writer = MemoryWriteService(store)
    writer.forget(record["id"])
    await store.flush()
    assert read_items(paths.semantic_file) == []
    assert store.get(record["id"]) is None
    with pytest.raises(UnknownMemoryItem):
        writer.forget(record["id"])


async def test_forgetting_a_fact_the_model_drew_from_an_exchange_forgets_the_exchange_keyed_by_it(
    store: MemoryItemStore, paths: MemoryPaths
) -> None:
    event = TurnMemoryEvent("telegram:1", "The door code? Same as my birth year backwards.", "Noted.", NOW, "u1", "a1")
    fact = MemoryCandidate(MemoryLayer.SEMANTIC, "fact", "The door code is 4791.", 0.9, 0.7)
    other = TurnMemoryEvent("telegram:1", "I repainted the front door green.", "Nice.", NOW, "u2", "a2")
    writer = MemoryWriteService(store)
    writer.record_turn(event, [fact], MemoryConfig(), ("The door code is 4791.", "security"))
    writer.record_turn(other, [], MemoryConfig(), ("door", "house"))
    await store.flush()
    [record] = read_items(paths.semantic_file)
    removed = writer.forget(record["id"])
    await store.flush()
    # The exchange said the code in other words; its key said it in the fact's, and would find it by them.
    assert [item.content for item in removed] == [
        "The door code is 4791.",
        f"User: {event.user_text} | Assistant: Noted.",
    ]
    assert [r["content"] for r in read_items(paths.episodic_file(NOW.date()))] == [
        f"User: {other.user_text} | Assistant: Nice."
    ]


async def test_an_exchange_said_again_gathers_the_keys_of_each_time(store: MemoryItemStore, paths: MemoryPaths) -> None:
    writer = MemoryWriteService(store)
    first = TurnMemoryEvent("telegram:1", "Pot pie again tonight.", "Enjoy!", NOW, "u1", "a1")
    again = TurnMemoryEvent("telegram:1", "Pot pie again tonight.", "Enjoy!", NOW, "u2", "a2")
    writer.record_turn(first, [], MemoryConfig(), ("poultry", "dinner"))
    writer.record_turn(again, [], MemoryConfig(), ("Dinner", "comfort food", *(f"word{n}" for n in range(40))))
    await store.flush()
    [record] = read_items(paths.episodic_file(NOW.date()))
    assert record["references"] == ["u1", "a1", "u2", "a2"]
    assert record["searchKeys"][:4] == ["poultry", "dinner", "comfort food", "word0"]
    assert len(record["searchKeys"]) == 32


async def test_code_aware_extraction_keeps_commands_paths_and_errors(
    store: MemoryItemStore, paths: MemoryPaths
) -> None:
    await say_turn(
        store,
        "Running the tests fails with ModuleNotFoundError: No module named 'yaml' in src/app/config.py",
        "Install it:\n```sh\npip install pyyaml\n```",
    )
    procedural = {(r["type"], r["content"]) for r in read_items(paths.procedural_file)}
    assert ("code", "```sh\npip install pyyaml\n```") in procedural
    assert ("paths", "Files: src/app/config.py") in procedural
    error = "Running the tests fails with ModuleNotFoundError: No module named 'yaml' in src/app/config.py"
    assert ("error", f"Error seen: {error}") in procedural
    assert any(kind == "failure" and "pip install pyyaml" in text for kind, text in procedural)


async def test_that_worked_records_the_previous_answer_as_a_fix() -> None:
    event = TurnMemoryEvent("telegram:1", "that worked, thanks!", "Glad it helped.", NOW)
    candidates = RuleBasedExtractor().extract(
        event, code_aware=False, previous_assistant_text="Run `sudo systemctl restart nginx`."
    )
    assert [(c.layer, c.type, c.content) for c in candidates] == [
        (MemoryLayer.PROCEDURAL, "fix", "Worked: Run `sudo systemctl restart nginx`.")
    ]


def test_questions_are_not_facts() -> None:
    event = TurnMemoryEvent("telegram:1", "Is my name is Ann?", "Yes.", NOW)
    assert RuleBasedExtractor().extract(event, code_aware=True) == []

"""Search keys: an item is found by the region of the places it names and by the dates its relative dates
meant when it was said; the prompt shows its own words, each relative date followed by those dates. With
`memory.llmExtractionEnabled`, an exchange is found by the facts the model drew from it and the words it
gave for what the exchange is about, through a write, a restart and a rebuilt index, and not after a hand
edit of its words."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.memory.index_database import INDEX_FILE_NAME
from bot.memory.lexical_index import tokenize
from bot.memory.llm_extraction import EXTRACTION_INSTRUCTIONS
from bot.memory.search_keys import place_keys, search_keys
from bot.memory.temporal import said_dates, with_said_dates
from bot.workspace import MemoryPaths
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, read_items, say, write_items

E = MemoryLayer.EPISODIC
# A Monday, three years before the tests run: what was said then must be read against then.
SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_a_place_named_mid_sentence_gives_its_region_and_country() -> None:
    text = "I volunteer at a shelter in Stamford, and we flew to New York City and Paris. Then Boston's parks."
    assert place_keys(text) == [
        "Connecticut United States",
        "New York United States",
        "France",
        "Massachusetts United States",
    ]
    # The first word of a sentence is not taken for a name; a person's name that is no place gives nothing.
    assert place_keys("Paris was lovely. I met Caroline there.") == []


def test_relative_dates_are_the_dates_they_meant_when_said() -> None:
    text = "Last Friday we hiked, yesterday I rested, next month I move; two weeks ago I ran. See you next Tuesday!"
    assert [d.label() for d in said_dates("Back home tomorrow, and off again next weekend.", SAID)] == [
        "9 May 2023",
        "20-21 May 2023",
    ]
    assert [(text[d.start : d.end], d.label()) for d in said_dates(text, SAID)] == [
        ("Last Friday", "5 May 2023"),
        ("yesterday", "7 May 2023"),
        ("next month", "June 2023"),
        ("two weeks ago", "24-30 April 2023"),
        ("next Tuesday", "9 May 2023"),
    ]
    assert with_said_dates("I went to the group yesterday.", SAID) == "I went to the group yesterday (7 May 2023)."
    assert with_said_dates("No dates here.", SAID) == "No dates here."


def test_relative_dates_in_any_case_are_read_even_with_the_letters_a_case_blind_match_takes_for_i_and_s() -> None:
    # Python's case-blind matching takes "ı", "İ" and "ſ" for "i" and "s", which `str.lower` does not make them.
    text = "THİS MORNİNG I woke, laſt week I ran, thıs coming FRİDAY I fly, ſix DAYS AGO I rested. Tonıght, a Hol..."
    assert [(text[d.start : d.end], d.label()) for d in said_dates(text, SAID)] == [
        ("THİS MORNİNG", "8 May 2023"),
        ("laſt week", "1-7 May 2023"),
        ("thıs coming FRİDAY", "12 May 2023"),
        ("ſix DAYS AGO", "2 May 2023"),
        ("Tonıght", "8 May 2023"),
    ]
    # A text that only looks like one ("birthday", "holiday", "frost") names no date.
    assert said_dates("A birthday on holiday, in the frost; the day-to-day.", SAID) == []


def test_an_items_keys_come_from_its_words_and_its_creation_time() -> None:
    stored = item(E, "[D1:3] Jon: I moved to Stamford last month.", SAID)
    assert search_keys(stored) == "Connecticut United States April 2023"


async def test_an_old_message_is_found_by_its_region_and_shown_with_the_dates_it_meant_then(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # Found by words alone (no embedder): what the keys add is the lexical side's.
    configure_memory(services, embeddingsModel=None)
    # Written by hand before the bot reads it, as an imported conversation is; "today" is years later.
    paths = MemoryPaths(services.workspace.memory_dir)
    write_items(
        paths.episodic_file(SAID.date()),
        [item(E, "[D1:3] Jon: We found a small flat near the shelter in Stamford last Friday!", SAID)],
    )
    grey = SAID.replace(month=9)
    write_items(
        paths.episodic_file(grey.date()),
        [item(E, "[D2:1] Ann: The weather was grey all week in Toronto, so we stayed in and baked bread.", grey)],
    )
    await say(services, channel, "1", "Who of us lives in Connecticut?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    # No word of the question is in the line: its place's state found it. Its words are shown, "last
    # Friday" as the Friday before the day it was said, not the Friday before today.
    assert "- 13:56 [D1:3] Jon: We found a small flat near the shelter in Stamford last Friday (5 May 2023)!" in memory
    assert "Connecticut" not in memory and "baked bread" not in memory


# An exchange that shares no word with the question below: only what the model drew from it can find it.
POT_PIE = "I baked a pot pie with the leftover turkey."
QUESTION = "Which meat do I like best?"
POULTRY_FACT = {"layer": "SEMANTIC", "type": "preference", "content": "The user likes poultry dishes.", "key": None,
                "confidence": 0.8}  # fmt: skip
POULTRY_KEYS = ["meat", "poultry", "comfort food"]
KEYS_ALONE = {"llmExtractionEnabled": True, "embeddingsModel": None, "workingTopK": 0, "legacyDailyNotesEnabled": False}


def reply_memory(fake_openai: FakeOpenAI) -> str:
    """The `# Memory` part of the system messages of the last reply the model was asked for (the extraction
    call that follows each reply has a system message of its own)."""
    prompts = [p for p in fake_openai.system_prompts() if p is not None and p != EXTRACTION_INSTRUCTIONS]
    return memory_section(prompts[-1]) or ""


def episodic_lines(services: Application) -> list[dict[str, Any]]:
    return [
        line for path in sorted(services.workspace.memory.episodic_dir.glob("*.jsonl")) for line in read_items(path)
    ]


async def ask(services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI) -> str:
    """The question, out of a fresh conversation (the exchange is no longer live: only memory has it)."""
    await say(services, channel, "1", "/new")
    await say(services, channel, "1", QUESTION)
    return reply_memory(fake_openai)


async def test_an_exchange_is_found_by_the_facts_the_model_drew_from_it_through_a_restart_and_a_rebuild(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    assert not set(tokenize(POT_PIE)) & set(tokenize(QUESTION))
    first = Application(env_for(workspace_dir, fake_openai))
    try:
        # Words alone (no embedder), no working set of recent exchanges and no daily notes standing in for an
        # empty pack: what finds the exchange is its keys.
        configure_memory(first, **KEYS_ALONE)
        fake_openai.script("Sounds cozy!", json.dumps({"items": [POULTRY_FACT], "keys": POULTRY_KEYS}))
        await say(first, channel, "1", POT_PIE)
        # The reply and the one extraction call, whose reply gave the keys: no call more.
        assert len(fake_openai.chat_requests()) == 2
        [exchange] = [line for line in episodic_lines(first) if POT_PIE in line["content"]]
        # Exchanges between it and the questions' own, which would bring it in as their neighbour.
        later = datetime.fromisoformat(exchange["createdAt"])
        chatter = [f"User: Note {n} about the garden shed. | Assistant: Noted." for n in range(4)]
        write_items(
            first.workspace.memory.episodic_file(later.date()), [item(E, c, later, type_="turn") for c in chatter]
        )
        # The exchange's own line holds its keys: the fact's sentence, then the model's words.
        assert exchange["searchKeys"] == ["The user likes poultry dishes.", *POULTRY_KEYS]
        assert [r["content"] for r in read_items(first.workspace.memory.semantic_file)] == [POULTRY_FACT["content"]]
        requests = len(fake_openai.chat_requests())

        memory = await ask(first, channel, fake_openai)
        assert f"User: {POT_PIE} | Assistant: Sounds cozy!" in memory
        assert "comfort food" not in memory  # found by its keys, shown by its words
        # One reply and one extraction call for the question: none more for the keys.
        assert len(fake_openai.chat_requests()) == requests + 2
    finally:
        await first.stop()

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        assert f"User: {POT_PIE}" in await ask(again, channel, fake_openai)
    finally:
        await again.stop()

    database = workspace_dir / "memory" / "index" / INDEX_FILE_NAME
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        path.unlink(missing_ok=True)
    rebuilt = Application(env_for(workspace_dir, fake_openai))
    try:
        assert f"User: {POT_PIE}" in await ask(rebuilt, channel, fake_openai)

        # The exchange's words edited by hand: the keys described the old words, and go with them.
        path = next(p for p in rebuilt.workspace.memory.episodic_dir.glob("*.jsonl") if POT_PIE in p.read_text())
        path.write_text(path.read_text().replace("a pot pie with the leftover turkey", "a quiche with the leeks"))
        stamp = path.stat().st_mtime_ns + 1_000_000_000
        os.utime(path, ns=(stamp, stamp))
        memory = await ask(rebuilt, channel, fake_openai)
        assert "quiche" not in memory and "pot pie" not in memory
        # The fact itself stays, an item of its own.
        assert [r["content"] for r in read_items(rebuilt.workspace.memory.semantic_file)] == [POULTRY_FACT["content"]]
    finally:
        await rebuilt.stop()


async def test_a_reply_without_keys_gives_the_exchange_its_facts_sentences(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, **KEYS_ALONE)
    fake_openai.script("Sounds cozy!", json.dumps({"items": [POULTRY_FACT]}))
    await say(services, channel, "1", POT_PIE)
    [exchange] = [line for line in episodic_lines(services) if POT_PIE in line["content"]]
    assert exchange["searchKeys"] == ["The user likes poultry dishes."]
    await say(services, channel, "1", "/new")
    await say(services, channel, "1", "Which dishes do I like?")
    assert f"User: {POT_PIE}" in reply_memory(fake_openai)


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ("meat poultry", "keys: Input should be a valid list"),
        ([f"word{n}" for n in range(13)], "keys: List should have at most 12 items"),
        (["meat", "a whole sentence about the pie, far longer than any key"], "keys.1: String should have at most 40"),
    ],
    ids=["not a list", "too many", "too long"],
)
async def test_a_malformed_extraction_reply_is_logged_and_the_rules_lose_nothing(
    keys: object,
    reason: str,
    services: Application,
    channel: RecordingChannel,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    configure_memory(services, llmExtractionEnabled=True)
    said = "I like turkey pot pie with a crisp crust."
    fake_openai.script("Sounds cozy!", json.dumps({"items": [POULTRY_FACT], "keys": keys}))
    with caplog.at_level(logging.WARNING):
        reply = await say(services, channel, "1", said)
    assert reply == "Sounds cozy!"
    warnings = [r.getMessage() for r in caplog.records if "LLM extraction failed" in r.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0]
    # The whole reply is refused: no fact of the model's, no key; the exchange and what the rules found stay.
    [exchange] = [line for line in episodic_lines(services) if said in line["content"]]
    assert "searchKeys" not in exchange
    assert [r["content"] for r in read_items(services.workspace.memory.semantic_file)] == [said]
    note = services.workspace.memory.daily_note_file(services.clock.now().date()).read_text()
    assert said in note

"""Search keys: an item is found by the region of the places it names and by the dates its relative dates
meant when it was said; the prompt shows its own words, each relative date followed by those dates."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.memory.search_keys import place_keys, search_keys
from bot.memory.temporal import said_dates, with_said_dates
from bot.workspace import MemoryPaths
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, say, write_items

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

"""Which items become candidates for a message beyond those that share its words or its meaning: the ones a
strong match points to by a rare word it shares with them (the second fact of a two-step question)."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.memory.lexical_index import Bm25Index
from bot.workspace import MemoryPaths
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, say, write_items

E = MemoryLayer.EPISODIC
ADOPTED = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
LATER = datetime(2023, 9, 2, 10, 15, tzinfo=UTC)


def test_rare_terms_are_those_of_few_other_items() -> None:
    index = Bm25Index()
    index.add_many(
        [item(E, f"Jon: a walk in the park number {n}", ADOPTED, item_id=f"walk{n}") for n in range(300)]
        + [
            item(E, "Jon: the greyhound Zephyr in the park", ADOPTED, item_id="seed"),
            item(E, "Jon: Zephyr chewed my slippers", LATER, item_id="zephyr"),
        ]
    )
    # "zephyr" is in one other item, "park" in nearly every one, "greyhound" in no other: only the first bridges.
    assert index.rare_terms("Jon: the greyhound Zephyr in the park", 0.005) == {"zephyr"}
    assert set(index.search_terms({"zephyr"}, 10)) == {"seed", "zephyr"}


async def test_a_strong_match_brings_in_the_item_its_rare_word_points_to(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # Words alone (no embedder): the later item shares no word with the question, only a name with its answer.
    configure_memory(services, embeddingsModel=None)
    paths = MemoryPaths(services.workspace.memory_dir)
    write_items(
        paths.episodic_file(ADOPTED.date()),
        [item(E, "[D1:4] Jon: We adopted a greyhound from the rescue shelter and named her Zephyr.", ADOPTED)],
    )
    write_items(
        paths.episodic_file(LATER.date()),
        [item(E, "[D7:2] Ann: Zephyr chewed through my running shoes again this morning.", LATER)],
    )
    write_items(
        paths.episodic_file(LATER.date().replace(day=20)),
        [item(E, "[D8:1] Ann: The bakery on the corner finally reopened after the summer.", LATER.replace(day=20))],
    )
    await say(services, channel, "1", "Which animal did Jon adopt from the rescue shelter?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "[D1:4] Jon: We adopted a greyhound" in memory
    assert "[D7:2] Ann: Zephyr chewed through my running shoes" in memory
    assert "bakery" not in memory


async def test_the_turns_a_few_after_a_strong_match_join_it_and_those_further_do_not(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # Words alone (no embedder): only the first turn shares words with the question; the answer comes two
    # turns later, as it often does in a conversation.
    configure_memory(services, embeddingsModel=None)
    paths = MemoryPaths(services.workspace.memory_dir)
    turns = [
        "[D3:1] Ann: Guess what arrived for the marathon training plan today?",
        "[D3:2] Jon: No idea, tell me!",
        "[D3:3] Ann: Carbon-plated racing flats, bright orange ones.",
        "[D3:4] Jon: Wow, fancy.",
        "[D3:5] Ann: Also booked a cottage by the lake for August.",
    ]
    write_items(paths.episodic_file(ADOPTED.date()), [item(E, text, ADOPTED) for text in turns])
    await say(services, channel, "1", "What arrived for the marathon training plan?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "[D3:1] Ann: Guess what arrived" in memory and "[D3:2] Jon: No idea" in memory
    assert "[D3:3] Ann: Carbon-plated racing flats, bright orange ones." in memory
    assert "cottage" not in memory  # four turns away

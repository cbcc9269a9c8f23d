"""A MEMORY.md larger than its share of the prompt: its beginning leads every prompt, and what is further
down reaches the model when a message is about it; /status and /context say how much is in the prompt,
and the owner is told once."""

from __future__ import annotations

import random

from bot.app import Application
from bot.memory.long_term_pieces import MAX_PIECE_CHARS, split_long_term
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, say

LAST_LINE = "The spare key of the boathouse hangs behind the blue heron painting."
WORDS = (
    "garden invoice meeting recipe bicycle holiday dentist project budget printer kettle lantern violin harbour "
    "orchard satchel compass ledger pottery quilt"
).split()


def large_memory_md(size: int = 200_000) -> str:
    """About `size` characters of sections and notes, ending with `LAST_LINE`."""
    rng = random.Random(7)
    parts = ["# About me\n\nI live in Lisbon and work as a translator.\n"]
    section = 0
    while sum(len(part) for part in parts) < size:
        section += 1
        parts.append(f"\n## Notes {section}\n")
        for _ in range(6):
            parts.append("- " + " ".join(rng.choice(WORDS) for _ in range(12)) + f" (note {section}).\n")
    parts.append(f"\n## Places\n\n{LAST_LINE}\n")
    return "".join(parts)


def test_memory_md_is_split_into_paragraphs_under_their_headings() -> None:
    text = "Intro line.\n\n# Home\n\n## Keys\n\nSpare key: under the mat.\nCar key: hook.\n\n## Pets\n\nA cat.\n"
    pieces = split_long_term(text)
    assert [(piece.headings, piece.text) for piece in pieces] == [
        ((), "Intro line."),
        (("Home", "Keys"), "Spare key: under the mat.\nCar key: hook."),
        (("Home", "Pets"), "A cat."),
    ]
    assert all(text[piece.start : piece.end] == piece.text for piece in pieces)
    long_list = "# List\n" + "".join(f"- item number {n} of a long list\n" for n in range(200))
    listed = split_long_term(long_list)
    assert len(listed) > 10 and all(len(piece.text) <= MAX_PIECE_CHARS for piece in listed)
    assert "".join(piece.text + "\n" for piece in listed) == long_list.removeprefix("# List\n")


async def test_the_last_line_of_a_200_kb_memory_md_reaches_the_model_when_asked_about(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, legacyDailyNotesEnabled=False)
    memory_md = large_memory_md()
    services.workspace.memory.long_term_file.write_text(memory_md)

    await say(services, channel, "1", "Hello there, how are you?")
    first = fake_openai.chat_requests()[-1]["messages"]
    assert first[0]["content"].count("I live in Lisbon") == 1  # the beginning leads the prompt
    assert "MEMORY.md goes on for" in first[0]["content"]  # and says that the rest is reached by relevance
    assert LAST_LINE not in str(first)

    await say(services, channel, "1", "Where is the spare key of the boathouse?")
    asked = fake_openai.chat_requests()[-1]["messages"]
    assert asked[0]["content"] == first[0]["content"]  # the first system message is the same: a cached prefix
    turn_prompt = asked[-2]
    assert turn_prompt["role"] == "system" and LAST_LINE in turn_prompt["content"]
    assert "Places: " + LAST_LINE in turn_prompt["content"]  # with the heading it sits under

    # A hand edit of the last line is what the next message sees.
    told_size = len(memory_md.strip())
    memory_md = memory_md.replace("blue heron", "green otter")
    services.workspace.memory.long_term_file.write_text(memory_md)
    await say(services, channel, "1", "Remind me: where is the spare key of the boathouse?")
    edited = fake_openai.chat_requests()[-1]["messages"][-2]["content"]
    assert "green otter painting" in edited and "blue heron" not in edited

    # The owner is told once, and /status and /context say how much of it is in the prompt.
    told = [text for key, text in services.notices.pending().items() if key.startswith("memory-md-over-share:")]
    assert len(told) == 1 and f"MEMORY.md ({told_size:,} characters) has outgrown its share" in told[0]
    for command in ("/status", "/context"):
        reply = await say(services, channel, "1", command)
        assert f"MEMORY.md: {len(memory_md.strip()):,} chars, over its share: the first " in reply
        assert "and 1 relevant part (" in reply


async def test_a_memory_md_that_fits_is_whole_in_the_prompt_and_nobody_is_told(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services.workspace.memory.long_term_file.write_text(f"# Places\n\n{LAST_LINE}\n")
    await say(services, channel, "1", "hello")
    assert LAST_LINE in fake_openai.chat_requests()[-1]["messages"][0]["content"]
    assert not services.notices.pending()
    assert f"MEMORY.md {len(LAST_LINE) + 10} chars;" in await say(services, channel, "1", "/status")


async def test_a_budget_with_no_room_for_memory_md_leaves_it_out_with_no_empty_header_and_says_so(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, softPromptBudgetTokens=0, maxPromptBudgetTokens=0)
    services.workspace.memory.long_term_file.write_text(f"# Places\n\n{LAST_LINE}\n")
    await say(services, channel, "1", "hello")
    system = "\n".join(str(m["content"]) for m in fake_openai.chat_requests()[-1]["messages"] if m["role"] == "system")
    assert "## Long-term Memory" not in system and "# Memory" not in system  # no header without content
    [told] = [text for key, text in services.notices.pending().items() if key.startswith("memory-md-over-share:")]
    assert told.startswith(f"MEMORY.md ({len(LAST_LINE) + 10} characters) is left out of the prompt")
    assert "memory.maxPromptBudgetTokens 0" in told
    status = await say(services, channel, "1", "/status")
    assert f"MEMORY.md: {len(LAST_LINE) + 10} chars, left out: the memory budget leaves it no room" in status

    configure_memory(services)  # back to the defaults: whole again, and the notice settled
    await say(services, channel, "1", "hello again")
    assert LAST_LINE in fake_openai.chat_requests()[-1]["messages"][0]["content"]
    assert not services.notices.pending()

"""`/memory`: listing, forgetting and pinning from the chat, and the memory in `/status`."""

from __future__ import annotations

import re

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import memory_section, say


async def test_list_forget_and_pin(services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI) -> None:
    assert await say(services, channel, "1", "/memory") == "The structured memory is empty so far."
    await say(services, channel, "1", "Remember that the bike lock code is 4242. I prefer tea.")

    listing = await say(services, channel, "1", "/memory bike lock")
    assert listing.startswith("Memory matching “bike lock”:")
    match = re.search(
        r"^(m[0-9a-f]{11}) · semantic/fact · conf 0\.80 · \d{4}-\d\d-\d\d\n  the bike lock", listing, re.M
    )
    assert match, listing
    bike_id = match.group(1)

    tea = await say(services, channel, "1", "/memory tea")
    tea_id = re.findall(r"^(m[0-9a-f]{11}) · semantic/preference", tea, re.M)[0]
    assert await say(services, channel, "1", f"/memory pin {tea_id}") == "Pinned: I prefer tea."
    await say(services, channel, "2", "hello")  # another chat, nothing about tea in the message
    assert "## Pinned Memory\n- I prefer tea." in (memory_section(fake_openai.system_prompts()[-1]) or "")

    forgotten = await say(services, channel, "1", f"/memory forget {bike_id}")
    assert forgotten == "Forgotten: the bike lock code is 4242."
    assert await say(services, channel, "1", "/memory bike lock") == "Nothing in memory matches “bike lock”."
    assert await say(services, channel, "1", "/memory forget m000") == "No memory item m000."
    assert await say(services, channel, "1", "/memory pin") == "Which item? /memory pin ID (the ids are in /memory)."


async def test_status_shows_the_memory_and_the_last_pack(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services.workspace.memory.long_term_file.write_text("Hello memory")
    await say(services, channel, "1", "My name is Ann.")
    await say(services, channel, "1", "who am I?")
    status = await say(services, channel, "1", "/status")
    assert "Memory: MEMORY.md 12 chars; items: episodic 2, semantic 1, procedural 0; today's notes: 2 entries" in status
    assert re.search(r"Memory pack \(last message\): \d+ candidates, \d+ selected, ~\d+ tokens", status), status

"""Memory V2 in the prompt: the scored pack within its budgets, and the legacy notes as the fallback."""

from __future__ import annotations

from datetime import timedelta

from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryLayer
from bot.workspace import MemoryPaths
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, item, memory_section, say, write_items

E, S, P = MemoryLayer.EPISODIC, MemoryLayer.SEMANTIC, MemoryLayer.PROCEDURAL


async def test_the_pack_is_filled_to_the_soft_budget_and_never_past_the_max(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # The soft budget holds one item; past it only items scoring at least 0.6 go in, up to the max.
    configure_memory(services, softPromptBudgetTokens=20, maxPromptBudgetTokens=50, workingTopK=1)
    now = services.clock.now().replace(second=0, microsecond=0)
    paths = MemoryPaths(services.workspace.memory_dir)
    write_items(
        paths.semantic_file,
        [
            item(S, "My name is Ann.", now - timedelta(days=10), type_="identity", salience=0.9, confidence=0.9),
            item(S, "I prefer green tea in the morning.", now - timedelta(days=2), salience=0.7),
            item(S, "The office wifi password is on the fridge.", now - timedelta(days=1)),
        ],
    )
    write_items(
        paths.procedural_file,
        [item(P, "Brew green tea at 80 degrees for 2 minutes.", now - timedelta(days=5), salience=0.6)],
    )
    yesterday = now - timedelta(days=1)
    long_turns = [
        item(E, f"User: tell me about tea number {n} | Assistant: " + "a long story about tea " * 6, yesterday)
        for n in range(4)
    ]
    write_items(paths.episodic_file(yesterday.date()), long_turns)
    latest = now - timedelta(hours=1)
    write_items(
        paths.episodic_file(latest.date()),
        [item(E, "User: hi | Assistant: hello", latest, type_="turn", confidence=1.0, salience=0.4)],
    )

    await say(services, channel, "1", "make me some green tea")
    memory = memory_section(fake_openai.system_prompts()[-1])
    assert memory == (
        "# Memory\n\n"
        "## Facts and Preferences\n"
        "- I prefer green tea in the morning.\n\n"
        "## Procedures and Fixes\n"
        "- Brew green tea at 80 degrees for 2 minutes."
    )
    assert TokenEstimator().text(memory.removeprefix("# Memory\n\n")) <= 50

    configure_memory(services, softPromptBudgetTokens=1800, maxPromptBudgetTokens=3500, workingTopK=1)
    await say(services, channel, "1", "make me some green tea")
    memory = memory_section(fake_openai.system_prompts()[-1])
    assert memory is not None
    assert "- My name is Ann.\n" in memory  # a core fact, salient enough without a shared word
    assert "wifi" not in memory  # neither relevant nor salient
    assert f"## Recent Exchanges\n### {latest:%Y-%m-%d (%A)}\n- {latest:%H:%M} User: hi | Assistant: hello" in memory
    assert memory.count("a long story about tea") == 4 * 6  # relevant earlier exchanges, within episodicTopK


async def test_once_items_exist_the_pack_replaces_the_daily_notes(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "My name is Ann.")
    await say(services, channel, "2", "who am I?")
    memory = memory_section(fake_openai.system_prompts()[-1])
    assert memory is not None
    assert "## Today's Notes" not in memory
    assert "## Facts and Preferences\n- My name is Ann." in memory
    assert "## Recent Exchanges\n### " in memory  # a heading per day, then each exchange with its time
    assert "User: My name is Ann. | Assistant: echo: My name is Ann." in memory


async def test_the_legacy_notes_are_the_fallback_and_can_be_switched_off(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    today = services.clock.now().date()
    services.workspace.memory.daily_note_file(today).write_text("[08:00] User: good morning | Assistant: morning!\n")
    await say(services, channel, "1", "hello")
    assert memory_section(fake_openai.system_prompts()[-1]) == (
        "# Memory\n\n## Today's Notes\n[08:00] User: good morning | Assistant: morning!"
    )

    configure_memory(services, legacyDailyNotesEnabled=False)
    for path in services.workspace.memory.items_dir.rglob("*.jsonl"):
        path.unlink()  # an empty pack again
    await say(services, channel, "1", "hello again")
    assert memory_section(fake_openai.system_prompts()[-1]) is None


async def test_turns_already_in_the_conversation_are_not_repeated(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "first")
    await say(services, channel, "1", "second")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "## Recent Exchanges" not in memory  # "first" is in the messages the model gets anyway
    await say(services, channel, "1", "/new")
    await say(services, channel, "1", "third")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "User: first | Assistant: echo: first" in memory and "User: second" in memory

"""What the model is sent of the memory: the exact `# Memory` section of the system prompt."""

from __future__ import annotations

from datetime import timedelta

from bot.app import BotServices
from bot.pipeline.systems.context_building import DEFAULT_PERSONA
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, memory_section, say


def persona_of(services: BotServices) -> str:
    path = services.workspace.system_prompt_file
    return (path.read_text().strip() if path.exists() else "") or DEFAULT_PERSONA


async def test_no_memory_means_no_memory_header(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "hello")
    prompt = fake_openai.system_prompts()[-1]
    assert prompt is not None and "# Memory" not in prompt
    persona, time_line = prompt.split("\n\n")
    assert persona == persona_of(services) and time_line.startswith("Current date and time:")


async def test_memory_md_only(services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI) -> None:
    services.workspace.memory.long_term_file.write_text("User prefers concise responses.\nProject uses Python 3.11.\n")
    await say(services, channel, "1", "hello")
    prompt = fake_openai.system_prompts()[-1]
    assert prompt is not None
    persona, time_line, memory = prompt.split("\n\n", 2)
    assert persona == persona_of(services) and time_line.startswith("Current date and time:")
    assert memory == ("# Memory\n\n## Long-term Memory\nUser prefers concise responses.\nProject uses Python 3.11.")


async def test_a_hand_edit_of_memory_md_is_seen_on_the_next_message(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, legacyDailyNotesEnabled=False)
    services.workspace.memory.long_term_file.write_text("The cat is called Tom.")
    await say(services, channel, "1", "hello")
    assert "The cat is called Tom." in (fake_openai.system_prompts()[-1] or "")
    services.workspace.memory.long_term_file.write_text("The cat is called Felix.")
    await say(services, channel, "1", "and now?")
    prompt = fake_openai.system_prompts()[-1] or ""
    assert "The cat is called Felix." in prompt and "Tom" not in prompt


async def test_daily_notes_of_today_and_the_recent_days_within_recent_days(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, recentDays=3)
    today = services.clock.now().date()
    memory_dir = services.workspace.memory_dir
    for back in range(0, 6):
        day = today - timedelta(days=back)
        (memory_dir / f"{day.isoformat()}.md").write_text(f"[10:0{back}] User: day {back} | Assistant: noted\n")
    (memory_dir / f"{(today - timedelta(days=2)).isoformat()}.md").write_text("\n")  # a day without content

    await say(services, channel, "1", "what did we do?")
    day = [(today - timedelta(days=back)).isoformat() for back in range(4)]
    assert memory_section(fake_openai.system_prompts()[-1]) == (
        "# Memory\n\n"
        "## Today's Notes\n[10:00] User: day 0 | Assistant: noted\n\n"
        "## Recent Context\n"
        f"### {day[1]}\n[10:01] User: day 1 | Assistant: noted\n\n"
        f"### {day[3]}\n[10:03] User: day 3 | Assistant: noted"
    )


async def test_the_model_sees_memory_as_it_was_before_this_exchange(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, legacyDailyNotesEnabled=True)
    await say(services, channel, "1", "the first message")
    # The first turn was written after its reply: its own prompt had no memory of it.
    assert memory_section(fake_openai.system_prompts()[0]) is None
    note = services.workspace.memory.daily_note_file(services.clock.now().date()).read_text()
    assert "User: the first message | Assistant: echo: the first message" in note


async def test_memory_over_the_budget_is_cut_with_a_visible_marker(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, softPromptBudgetTokens=10, maxPromptBudgetTokens=20)
    services.workspace.memory.long_term_file.write_text("word " * 100)
    await say(services, channel, "1", "hello")
    memory = memory_section(fake_openai.system_prompts()[-1])
    assert memory is not None
    assert memory.startswith("# Memory\n\n## Long-term Memory\nword word")
    assert memory.endswith("more characters cut: over the memory prompt budget]")
    assert len(memory) < 20 * 3.5 + 60


async def test_memory_disabled_sends_nothing_and_writes_nothing(
    services: BotServices, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, enabled=False)
    services.workspace.memory.long_term_file.write_text("Secret plans.")
    await say(services, channel, "1", "hello")
    assert "# Memory" not in (fake_openai.system_prompts()[-1] or "")
    assert not services.workspace.memory.daily_note_file(services.clock.now().date()).exists()

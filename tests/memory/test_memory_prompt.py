"""What the model is sent of the memory: the exact `# Memory` section of the system prompt."""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta

import pytest

from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.memory.prompt_building import MemoryPrompt, left_for_graph
from bot.pipeline.systems.context_building import DEFAULT_PERSONA
from bot.settings import MemoryConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, memory_section, say


def persona_of(services: Application) -> str:
    path = services.workspace.system_prompt_file
    return (path.read_text().strip() if path.exists() else "") or DEFAULT_PERSONA


async def test_no_memory_means_no_memory_header(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "hello")
    prompt = fake_openai.system_prompts()[-1]
    assert prompt is not None and "# Memory" not in prompt
    persona, time_line = prompt.split("\n\n")  # the second system message (the time) after the first
    assert persona == persona_of(services) and time_line.startswith("Current date and time:")


async def test_memory_md_only(services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI) -> None:
    services.workspace.memory.long_term_file.write_text("User prefers concise responses.\nProject uses Python 3.11.\n")
    await say(services, channel, "1", "hello")
    [first, *_] = fake_openai.chat_requests()[-1]["messages"]
    assert first["role"] == "system"  # MEMORY.md stays the same from message to message: it leads
    assert first["content"] == persona_of(services) + (
        "\n\n# Memory\n\n## Long-term Memory\nUser prefers concise responses.\nProject uses Python 3.11."
    )


async def test_a_hand_edit_of_memory_md_is_seen_on_the_next_message(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
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
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, recentDays=3)
    today = services.clock.now().date()
    memory_dir = services.workspace.memory_dir
    for back in range(0, 6):
        day = today - timedelta(days=back)
        (memory_dir / f"{day.isoformat()}.md").write_text(f"[10:0{back}] User: day {back} | Assistant: noted\n")
    (memory_dir / f"{(today - timedelta(days=2)).isoformat()}.md").write_text("\n")  # a day without content

    await say(services, channel, "1", "what did we do?")
    days = [(today - timedelta(days=back)).isoformat() for back in range(4)]
    assert memory_section(fake_openai.system_prompts()[-1]) == (
        "# Memory\n\n"
        "## Today's Notes\n[10:00] User: day 0 | Assistant: noted\n\n"
        "## Recent Context\n"
        f"### {days[1]}\n[10:01] User: day 1 | Assistant: noted\n\n"
        f"### {days[3]}\n[10:03] User: day 3 | Assistant: noted"
    )


async def test_an_unreadable_day_of_notes_is_logged_and_the_other_days_are_shown(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    configure_memory(services, recentDays=2)
    today = services.clock.now().date()
    memory_dir = services.workspace.memory_dir
    (memory_dir / f"{today.isoformat()}.md").write_text("[10:00] User: today | Assistant: noted\n")
    (memory_dir / f"{(today - timedelta(days=1)).isoformat()}.md").mkdir()  # cannot be read as a file
    two_days_ago = (today - timedelta(days=2)).isoformat()
    (memory_dir / f"{two_days_ago}.md").write_text("[10:02] User: two days ago | Assistant: noted\n")

    with caplog.at_level(logging.WARNING):
        await say(services, channel, "1", "what did we do?")
    assert memory_section(fake_openai.system_prompts()[-1]) == (
        "# Memory\n\n"
        "## Today's Notes\n[10:00] User: today | Assistant: noted\n\n"
        f"## Recent Context\n### {two_days_ago}\n[10:02] User: two days ago | Assistant: noted"
    )
    assert any(r.getMessage().startswith("[Memory] Could not read the notes of") for r in caplog.records)


async def test_the_model_sees_memory_as_it_was_before_this_exchange(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, legacyDailyNotesEnabled=True)
    await say(services, channel, "1", "the first message")
    # The first turn was written after its reply: its own prompt had no memory of it.
    assert memory_section(fake_openai.system_prompts()[0]) is None
    note = services.workspace.memory.daily_note_file(services.clock.now().date()).read_text()
    assert "User: the first message | Assistant: echo: the first message" in note


async def test_memory_over_the_budget_is_cut_with_a_visible_marker(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, softPromptBudgetTokens=10, maxPromptBudgetTokens=20)
    services.workspace.memory.long_term_file.write_text("word " * 100)
    await say(services, channel, "1", "hello")
    memory = memory_section(fake_openai.chat_requests()[-1]["messages"][0]["content"])
    assert memory is not None
    assert memory.startswith("# Memory\n\n## Long-term Memory\nword word")
    assert memory.endswith("more characters cut: over the memory prompt budget]")
    assert len(memory) < 20 * 3.5 + 60


async def test_memory_disabled_sends_nothing_and_writes_nothing(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure_memory(services, enabled=False)
    services.workspace.memory.long_term_file.write_text("Secret plans.")
    await say(services, channel, "1", "hello")
    assert "# Memory" not in (fake_openai.system_prompts()[-1] or "")
    assert not services.workspace.memory.daily_note_file(services.clock.now().date()).exists()


def offered_tools(fake_openai: FakeOpenAI) -> set[str]:
    return {tool["function"]["name"] for tool in fake_openai.chat_requests()[-1].get("tools", [])}


async def test_switching_memory_off_and_on_applies_live_to_its_tools_too(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "hello")
    assert {"memory_search", "memory_add", "read_memory"} <= offered_tools(fake_openai)
    configure_memory(services, enabled=False)
    await say(services, channel, "1", "hello again")
    assert not {name for name in offered_tools(fake_openai) if "memory" in name}
    configure_memory(services, enabled=True)
    await say(services, channel, "1", "and once more")
    assert {"memory_search", "memory_add", "read_memory"} <= offered_tools(fake_openai)


async def test_what_the_live_conversation_holds_is_not_repeated_from_memory(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "My cat is called Tom.")
    await say(services, channel, "1", "and the dog is Rex.")
    request = fake_openai.last_chat_request()["messages"]
    assert [m["content"] for m in request if m["role"] == "user"] == ["My cat is called Tom.", "and the dog is Rex."]
    assert "Tom" not in (fake_openai.system_prompts()[-1] or "")  # neither as a note line nor as an item
    await say(services, channel, "1", "/new")
    await say(services, channel, "1", "what are my pets called?")
    assert "My cat is called Tom." in (memory_section(fake_openai.system_prompts()[-1]) or "")


async def test_each_request_begins_with_the_one_before(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    """What changes every message (the time, the retrieved memory) comes after the history, just before
    the newest message, so a provider's prompt cache reuses everything before it."""
    services.workspace.memory.long_term_file.write_text("The owner's name is Ann.\n")
    for text in ["I moved to Lisbon.", "I like green tea.", "what's the weather like?", "thanks!"]:
        await say(services, channel, "1", text)
    requests = [request["messages"] for request in fake_openai.chat_requests()]
    for before, after in itertools.pairwise(requests):
        assert after[: len(before) - 2] == before[:-2]  # all but the previous turn prompt and message
        assert after[len(before) - 2] == before[-1] and after[len(before) - 1]["role"] == "assistant"
    assert requests[-1][-2]["role"] == "system" and requests[-1][-2]["content"].startswith("Current date and time")


async def test_the_guide_of_a_new_memory_md_and_any_comment_never_reach_the_model(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    memory_md = services.workspace.memory.long_term_file
    guide = memory_md.read_text()
    assert guide.startswith("<!--") and "python -m bot memory edit" in guide  # a new workspace's MEMORY.md
    await say(services, channel, "1", "hello")
    assert "# Memory" not in (fake_openai.system_prompts()[-1] or ""), "the guide alone is no memory"

    memory_md.write_text(guide + "\n## About me\n- Lives in Lisbon. <!-- moved in 2025 -->\n\n\n\n- Likes tea.\n")
    await say(services, channel, "1", "and now?")
    [first, *_] = fake_openai.chat_requests()[-1]["messages"]
    assert first["content"] == persona_of(services) + (
        "\n\n# Memory\n\n## Long-term Memory\n## About me\n- Lives in Lisbon. \n\n- Likes tea."
    )
    shown = "## About me\n- Lives in Lisbon. \n\n- Likes tea."
    status = await services.status.report(await services.sessions.get_or_create(channel.channel_type, "1"))
    assert f"MEMORY.md {len(shown)} chars" in status


def test_the_graph_gets_what_the_recalled_memory_left_of_the_soft_budget() -> None:
    config = MemoryConfig(soft_prompt_budget_tokens=100)
    estimator = TokenEstimator()
    turn = "# Memory\n\n## Related Earlier Exchanges\n- " + "Marta moved to Lisbon. " * 6
    memory_md = "# Memory\n\n## Long-term Memory\n" + "Always shown, never recalled. " * 40
    recalled = MemoryPrompt(memory_md, turn, None)
    assert 0 < estimator.text(turn) < 100 < estimator.text(memory_md)
    # MEMORY.md is shown anyway and does not count; what was recalled for the message does.
    assert left_for_graph(config, recalled, estimator, None) == 100 - estimator.text(turn)
    assert left_for_graph(config, MemoryPrompt(memory_md, turn * 4, None), estimator, None) == 0
    assert left_for_graph(config, MemoryPrompt(memory_md, "", None), estimator, None) == 100
    assert left_for_graph(config, None, estimator, None) == 100

"""Skills through the whole pipeline: listed in the system prompt the model receives, switched on by
`/skill` or the `load_skill` tool, picked up after a hand edit, and their procedural memory favoured."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.app import Application
from bot.domain.memory import MemoryLayer
from bot.skills.library import SkillLibrary
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import item, memory_section, say, write_items
from tests.tools.test_mcp import offered, tool_results, write_config

NOW = datetime.now(UTC)
SKILL = "trip-planning"

TRIP = """---
name: trip-planning
description: Plan a trip with dates, budget, bookings and a packing list.
---
# Planning a trip

1. Ask for the dates and the budget first.
2. Suggest refundable bookings.
"""


def write_skill(services: Application, folder: str, text: str) -> Path:
    path = services.workspace.skills_dir / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    # Seen as an edit even within one filesystem timestamp tick.
    stamp = time.time_ns() + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))
    return path


def system_prompt(fake_openai: FakeOpenAI) -> str:
    prompt = fake_openai.system_prompts()[-1]
    assert prompt is not None
    return prompt


async def test_skills_are_listed_and_a_hand_edit_is_picked_up_without_a_restart(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "hi")
    assert "# Skills" not in system_prompt(fake_openai)
    assert "load_skill" not in offered(fake_openai)  # no skill yet: no tool to load one

    write_skill(services, "trip", TRIP)
    (services.workspace.skills_dir / "trip" / "checklist.md").write_text("- passport\n")
    await say(services, channel, "1", "hello")
    prompt = system_prompt(fake_openai)
    assert "# Skills\n" in prompt
    assert "- trip-planning: Plan a trip with dates, budget, bookings and a packing list." in prompt
    assert "load_skill" in offered(fake_openai)

    write_skill(services, "trip", TRIP.replace("Plan a trip with dates", "Organise travel with dates"))
    write_skill(services, "notes", "# Meeting notes\n\nTurn a meeting transcript into decisions and actions.\n")
    await say(services, channel, "1", "and now?")
    prompt = system_prompt(fake_openai)
    assert "- trip-planning: Organise travel with dates, budget, bookings and a packing list." in prompt
    assert "- notes: Turn a meeting transcript into decisions and actions." in prompt  # no front matter


async def test_the_list_stays_within_its_budget(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    for n in range(30):
        write_skill(services, f"skill{n:02d}", f"---\nname: skill{n:02d}\ndescription: {'word ' * 30}\n---\nDo it.\n")
    write_config(services, {"skills": {"promptBudgetChars": 600, "maxDescriptionChars": 60}})
    await say(services, channel, "1", "hi")
    prompt = system_prompt(fake_openai)
    catalog = prompt[prompt.index("# Skills") :].split("\n\n")[0]
    assert len(catalog) <= 600 + 120  # the budget, and the one line that says how many were left out
    assert "- skill00: word word" in catalog
    assert "more skills not listed (skills.promptBudgetChars)" in catalog


async def test_slash_skill_switches_a_skill_on_and_its_edited_instructions_follow(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    path = write_skill(services, "trip", TRIP)
    (path.parent / "checklist.md").write_text("- passport\n")
    assert "trip-planning" in await say(services, channel, "1", "/skill")
    assert await say(services, channel, "1", "/skill trip-planning") == (
        "Skill trip-planning is active: Plan a trip with dates, budget, bookings and a packing list."
    )
    assert "Skills: trip-planning (active: trip-planning)" in await say(services, channel, "1", "/status")
    await say(services, channel, "1", "I want to go to Lisbon")
    prompt = system_prompt(fake_openai)
    assert "## Active skill: trip-planning" in prompt
    assert "Files beside it (read them with read_file): checklist.md" in prompt
    assert "1. Ask for the dates and the budget first." in prompt

    write_skill(services, "trip", TRIP.replace("Suggest refundable bookings.", "Always suggest trains first."))
    await say(services, channel, "1", "what next?")
    prompt = system_prompt(fake_openai)
    assert "Always suggest trains first." in prompt and "refundable" not in prompt

    assert await say(services, channel, "1", "/skill off") == "No skill is active now."
    await say(services, channel, "1", "thanks")
    assert "## Active skill" not in system_prompt(fake_openai)
    assert "There is no skill named 'cooking'" in await say(services, channel, "1", "/skill cooking")


async def test_the_model_loads_a_skill_with_the_tool(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    write_skill(services, "trip", TRIP)
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("load_skill", {"name": "trip-planning"}, id="k1")]),
        "Let's plan it. When do you leave?",
        Reply(tool_calls=[ToolCallSpec("load_skill", {"name": "nope"}, id="k2")]),
        "ok",
    )
    await say(services, channel, "1", "help me plan a trip to Rome")
    [result] = tool_results(fake_openai)
    assert result.startswith(
        "Skill trip-planning is now active for this conversation.\n\n## Active skill: trip-planning"
    )
    assert "2. Suggest refundable bookings." in result
    session = await services.sessions.get("test:1")
    assert session is not None and session.metadata.active_skill == "trip-planning"

    await say(services, channel, "1", "next week")
    assert "## Active skill: trip-planning" in system_prompt(fake_openai)
    assert tool_results(fake_openai)[-1] == "Error: there is no skill named 'nope'. Skills: trip-planning."


async def test_the_active_skill_favours_its_procedural_items_in_the_memory_pack(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    write_skill(services, "trip", TRIP)
    write_items(
        services.workspace.memory.procedural_file,
        [
            item(MemoryLayer.PROCEDURAL, "Book the overnight sleeper from Paris to Vienna.", NOW, tags=[SKILL]),
            item(MemoryLayer.PROCEDURAL, "Water the tomatoes every second evening.", NOW, tags=["garden"]),
        ],
    )
    await say(services, channel, "1", "what should I do first?")
    before = memory_section(system_prompt(fake_openai)) or ""
    assert "overnight sleeper" not in before

    await say(services, channel, "1", "/skill trip-planning")
    await say(services, channel, "1", "what should I do first?")
    after = memory_section(system_prompt(fake_openai))
    assert after is not None
    procedures = after[after.index("## Procedures and Fixes") :]
    assert "Book the overnight sleeper from Paris to Vienna." in procedures
    assert "tomatoes" not in after


async def test_procedures_learnt_while_a_skill_is_active_are_tagged_with_it(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    write_skill(services, "trip", TRIP)
    await say(services, channel, "1", "/skill trip-planning")
    await say(services, channel, "1", "To check the trains I run:\n```bash\ncurl -s https://example.org/trains\n```")
    await say(services, channel, "1", "/skill off")
    await say(services, channel, "1", "And for the garden:\n```bash\nwater --tomatoes\n```")
    procedures = [
        json.loads(line) for line in services.workspace.memory.procedural_file.read_text().splitlines() if line
    ]
    trains = [p for p in procedures if "curl -s" in p["content"]]
    garden = [p for p in procedures if "water --tomatoes" in p["content"]]
    assert trains and all(SKILL in p["tags"] for p in trains)
    assert garden and not any(SKILL in p["tags"] for p in garden)


async def test_skills_can_be_switched_off(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    write_skill(services, "trip", TRIP)
    write_config(services, {"skills": {"enabled": False}})
    await say(services, channel, "1", "hi")
    assert "# Skills" not in system_prompt(fake_openai)
    assert "load_skill" not in offered(fake_openai)
    assert await say(services, channel, "1", "/skill trip-planning") == (
        "Skills are off (skills.enabled in runtime-config.json)."
    )


async def test_the_library_sees_a_skill_added_in_a_folder_already_there_edited_and_removed(tmp_path: Path) -> None:
    # Between changes the library answers from its last look (a few stats, no scan): each change must show.
    library = SkillLibrary(tmp_path / "skills")
    assert await library.skills() == []
    folder = tmp_path / "skills" / "trip"
    folder.mkdir(parents=True)
    assert await library.skills() == []
    (folder / "SKILL.md").write_text(TRIP)
    assert [skill.name for skill in await library.skills()] == [SKILL]
    assert [skill.name for skill in await library.skills()] == [SKILL]  # unchanged: the same answer
    (folder / "SKILL.md").write_text(TRIP.replace("name: trip-planning", "name: travel"))
    assert [skill.name for skill in await library.skills()] == ["travel"]
    (folder / "SKILL.md").unlink()
    assert await library.skills() == []


async def test_front_matter_as_other_tools_write_it_and_a_hand_edits_slips_are_read_and_logged(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(
        services, "trip", "---\nname: trip\ndescription: >-\n  Plan a trip: dates,\n  budget, bookings.\n---\n1. Ask.\n"
    )
    write_skill(services, "notes", "---\nname: Meeting Notes\ndescription: Decisions and actions.\n---\nSummarise.\n")
    write_skill(services, "recipes", "---\nname: recipes\ndescription: Cook from what is in the fridge.\n\n1. Ask.\n")
    path = write_skill(services, "latin", "")
    path.write_bytes("---\nname: latin\ndescription: Caf\xe9 menus.\n---\nOrder.\n".encode("latin-1"))
    await say(services, channel, "1", "hi")
    await say(services, channel, "1", "and again")
    catalog = system_prompt(fake_openai).split("# Skills\n", 1)[1]
    assert "- trip: Plan a trip: dates, budget, bookings.\n" in catalog
    assert "- notes: Decisions and actions.\n" in catalog  # named after its folder
    assert "- recipes: --- name: recipes description: Cook from what is in the fridge." in catalog
    assert "- latin: Caf\ufffd menus." in catalog
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert sum("'Meeting Notes' is no skill name" in line and "named 'notes' after its folder" in line
               for line in warnings) == 1  # fmt: skip
    assert sum("recipes/SKILL.md: the front matter has no closing --- line" in line for line in warnings) == 1
    assert sum("latin/SKILL.md: line 3 holds bytes that are not UTF-8" in line for line in warnings) == 1

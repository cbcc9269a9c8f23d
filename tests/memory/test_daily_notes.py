"""Daily notes: the documented line format, written after each finished exchange."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.app import Application
from bot.memory.daily_notes import DailyNotes, format_note_line
from bot.memory.documents import MemoryFiles
from bot.workspace import MemoryPaths
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import say


def test_the_line_format_cuts_and_flattens() -> None:
    at = datetime(2026, 2, 7, 14, 5, tzinfo=UTC)
    user = "first line\nsecond line\r\nthird " + "u" * 300
    assistant = "answer\n" + "a" * 400
    line = format_note_line(at, user, assistant)
    flat_user = ("first line second line third " + "u" * 300)[:200]
    flat_assistant = ("answer " + "a" * 400)[:300]
    assert line == f"[14:05] User: {flat_user} | Assistant: {flat_assistant}"
    assert "\n" not in line and len(flat_user) == 200 and len(flat_assistant) == 300


def test_the_time_is_the_configured_zones() -> None:
    at = datetime(2026, 2, 7, 23, 30, tzinfo=UTC).astimezone(ZoneInfo("Asia/Tokyo"))
    assert format_note_line(at, "hi", "hello") == "[08:30] User: hi | Assistant: hello"


async def test_each_exchange_appends_one_line_to_todays_note(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("Hello!\nHow can I help?", "Sure.")
    await say(services, channel, "1", "hi there\nbot")
    await say(services, channel, "1", "help me")
    note = services.workspace.memory.daily_note_file(services.clock.now().date()).read_text()
    lines = note.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"\[\d\d:\d\d\] User: hi there bot \| Assistant: Hello! How can I help\?", lines[0])
    assert re.fullmatch(r"\[\d\d:\d\d\] User: help me \| Assistant: Sure\.", lines[1])


async def test_a_failed_reply_writes_no_note(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    from tests.fakes.openai_server import Fault

    services.workspace.runtime_config_file.write_text('{"llm": {"maxRetries": 0}}')
    fake_openai.fail_next(1, Fault.status(503))
    await say(services, channel, "1", "hello?")
    assert not services.workspace.memory.daily_note_file(services.clock.now().date()).exists()


async def test_a_note_read_after_the_bots_own_append_shows_it_and_a_hand_edit_after_that(tmp_path: Path) -> None:
    notes = DailyNotes(MemoryFiles(MemoryPaths(tmp_path / "memory")))
    at = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)

    async def read() -> str | OSError:
        [text] = await notes.read_days([at.date()])
        return text

    assert await read() == ""
    first = await notes.append(at, "hello", "hi")
    assert await read() == first
    second = await notes.append(at, "and now?", "still here")
    assert await read() == f"{first}\n{second}"  # grown in the cache, as on disk
    path = MemoryPaths(tmp_path / "memory").daily_note_file(at.date())
    assert path.read_text() == f"{first}\n{second}\n"
    path.write_text("[09:00] User: edited by hand | Assistant: ok\n")
    assert await read() == "[09:00] User: edited by hand | Assistant: ok"

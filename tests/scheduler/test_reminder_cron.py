"""Repeating reminders fire when cron would: the times the model's cron expression gives, checked against
cron's own definition (`man 5 crontab`), written out here independently of APScheduler."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.app import Application
from bot.domain.model import utc_now
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say
from tests.tools.test_mcp import tool_results

BERLIN = ZoneInfo("Europe/Berlin")
_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


def _values(field: str, low: int, high: int) -> set[int]:
    """The numbers a cron field names: lists of `*`, `n`, `a-b`, each with an optional `/step`."""
    chosen: set[int] = set()
    for item in field.split(","):
        span, _, step = item.partition("/")
        if span == "*":
            first, last = low, high
        else:
            start, _, end = span.partition("-")
            first = _NAMES[start] if start in _NAMES else int(start)
            last = (_NAMES[end] if end in _NAMES else int(end)) if end else (high if step else first)
        chosen.update(range(first, last + 1, int(step or 1)))
    return chosen


def cron_times(expression: str, zone: ZoneInfo, after: datetime, count: int) -> list[datetime]:
    """The first `count` times at or after `after` that cron runs `expression` at, in UTC.

    A day is chosen by its day of month and its day of week (0 and 7 are Sunday); when both fields are
    restricted (neither starts with `*`), a day that matches either one is chosen, else one that matches both.
    """
    minute, hour, day, month, weekday = expression.split()
    minutes, hours = _values(minute, 0, 59), _values(hour, 0, 23)
    days, months = _values(day, 1, 31), _values(month, 1, 12)
    weekdays = {value % 7 for value in _values(weekday, 0, 7)}
    either = not day.startswith("*") and not weekday.startswith("*")
    found: list[datetime] = []
    local_day: date = after.astimezone(zone).date()
    while len(found) < count:
        on_day, on_weekday = local_day.day in days, local_day.isoweekday() % 7 in weekdays
        if local_day.month in months and ((on_day or on_weekday) if either else (on_day and on_weekday)):
            for at in sorted(time(h, m) for h in hours for m in minutes):
                moment = datetime.combine(local_day, at, tzinfo=zone).astimezone(UTC)
                if moment >= after and len(found) < count:
                    found.append(moment)
        local_day += timedelta(days=1)
    return found


EXPRESSIONS = [
    "0 9 1 * 1",  # the 1st of each month, and every Monday
    "30 18 13 * fri",  # every 13th, and every Friday
    "0 12 1,15 * 7",  # the 1st and the 15th, and every Sunday (7)
    "15 7 */10 * 0",  # a day field starting with '*': Sundays that are the 1st, 11th, 21st or 31st
    "0 8 * * mon,3",  # names and numbers together: Mondays and Wednesdays
    "0 9 * * 1-5",
]


async def test_a_repeating_reminder_fires_when_cron_would(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    from tests.conftest import env_for

    app = Application(env_for(workspace_dir, fake_openai, bot_timezone="Europe/Berlin"))
    try:
        calls = [
            ToolCallSpec("schedule_reminder", {"text": f"r{n}", "cron": cron}, id=f"c{n}")
            for n, cron in enumerate(EXPRESSIONS)
        ]
        fake_openai.script(Reply(tool_calls=calls), "All set.")
        await say(app, channel, "1", "set these up")
        pending = {reminder.text: reminder for reminder in await app.reminders.pending("test:1")}
        listing = await say(app, channel, "1", "/reminders")
        expected: dict[str, list[datetime]] = {}
        for n, (cron, result) in enumerate(zip(EXPRESSIONS, tool_results(fake_openai), strict=True)):
            reminder = pending[f"r{n}"]
            expected[f"r{n}"] = cron_times(cron, BERLIN, reminder.created_at - timedelta(seconds=1), 4)
            shown = f"{expected[f'r{n}'][0].astimezone(BERLIN):%Y-%m-%d %H:%M} (Europe/Berlin), repeats '{cron}': r{n}"
            assert result.endswith(shown), (cron, result)
            assert f"[{reminder.id}] {shown}" in listing

        # The scheduler's checks, each at the soonest time a reminder is due: what is delivered when.
        delivered: dict[str, list[datetime]] = {text: [] for text in expected}
        moment = utc_now()

        async def deliver(channel_type: str, chat_id: str, text: str) -> None:
            delivered[text.removeprefix("⏰ Reminder: ")].append(moment)

        app.reminders.connect(deliver, {"test"})
        while any(len(times) < 4 for times in delivered.values()):
            moment = min(reminder.due_at for reminder in await app.reminders.pending("test:1"))
            await app.reminders.fire_due(now=moment)
        assert {text: times[:4] for text, times in delivered.items()} == expected
    finally:
        await app.stop()

"""Reminders: scheduled by the model's tools, stored in the workspace, delivered once at their time."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.app import Application
from bot.channels.base import ChatUnreachable
from bot.domain.model import utc_now
from bot.scheduler.reminder_store import Reminder, ReminderFile, ReminderStore, ReminderTable
from bot.scheduler.reminders import InvalidReminder, ReminderService, next_cron_time, parse_delay
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say
from tests.postgres_server import OpenDatabases
from tests.tools.test_mcp import tool_results

BERLIN = ZoneInfo("Europe/Berlin")


class Outbox:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.fail = fail

    async def __call__(self, channel_type: str, chat_id: str, text: str) -> None:
        if self.fail:
            raise ConnectionError("channel down")
        self.sent.append((channel_type, chat_id, text))


@dataclass
class ReminderStoreCase:
    open: Callable[[], Awaitable[ReminderStore]]  # the store as a new process opens it


@pytest.fixture(params=["files", "postgres"])
async def reminder_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ReminderStoreCase]:
    """Each reminder test runs on `reminders.json` and on PostgreSQL's `reminders` table."""
    if request.param == "files":

        async def file() -> ReminderStore:
            return ReminderFile(tmp_path / "reminders.json")

        yield ReminderStoreCase(file)
        return
    url: str = request.getfixturevalue("postgres_database")
    databases = OpenDatabases(url)

    async def table() -> ReminderStore:
        return ReminderTable(await databases.open())

    try:
        await (await databases.open()).fetch("DELETE FROM reminders RETURNING id")
        yield ReminderStoreCase(table)
    finally:
        await databases.close()


async def service(case: ReminderStoreCase, outbox: Outbox | None = None) -> ReminderService:
    reminders = ReminderService(await case.open(), BERLIN, "Europe/Berlin")
    await reminders.load()
    if outbox is not None:
        reminders.connect(outbox, {"telegram"})
    return reminders


def test_delays_and_cron_expressions() -> None:
    assert parse_delay("1h30m") == timedelta(hours=1, minutes=30)
    assert parse_delay("2d") == timedelta(days=2)
    with pytest.raises(InvalidReminder):
        parse_delay("soon")
    # 09:00 on weekdays in Berlin is 08:00 UTC in winter.
    after = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # a Friday
    assert next_cron_time("0 9 * * 1-5", BERLIN, after) == datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    with pytest.raises(InvalidReminder):
        next_cron_time("every day", BERLIN, after)


async def test_a_reminder_is_delivered_once_at_its_time_and_survives_a_restart(
    reminder_store: ReminderStoreCase,
) -> None:
    reminders = await service(reminder_store)
    reminder = await reminders.add("telegram:1", "telegram", "1", "call mum", delay="10m")

    outbox = Outbox()
    restarted = await service(reminder_store, outbox)  # a new process reads the same store
    assert [r.id for r in (await restarted.pending("telegram:1"))] == [reminder.id]
    assert await restarted.fire_due(now=reminder.due_at - timedelta(seconds=1)) == 0
    assert await restarted.fire_due(now=reminder.due_at + timedelta(seconds=3)) == 1
    assert outbox.sent == [("telegram", "1", "⏰ Reminder: call mum")]
    assert await restarted.fire_due(now=reminder.due_at + timedelta(minutes=5)) == 0
    assert await (await service(reminder_store)).pending("telegram:1") == []


async def test_a_reminder_missed_while_down_comes_late_once_with_a_note(reminder_store: ReminderStoreCase) -> None:
    reminder = await (await service(reminder_store)).add(
        "telegram:1", "telegram", "1", "water the plants", at="2030-01-01T08:00"
    )
    outbox = Outbox()
    after_downtime = await service(reminder_store, outbox)
    await after_downtime.fire_due(now=reminder.due_at + timedelta(hours=3))
    await after_downtime.fire_due(now=reminder.due_at + timedelta(hours=4))
    assert len(outbox.sent) == 1
    assert outbox.sent[0][2] == (
        "⏰ Reminder: water the plants\n(This was due at 2030-01-01 08:00; I was offline then, so it comes late.)"
    )


async def test_a_failed_delivery_is_never_repeated(reminder_store: ReminderStoreCase) -> None:
    reminder = await (await service(reminder_store)).add("telegram:1", "telegram", "1", "once only", delay="1m")
    failing = await service(reminder_store, Outbox(fail=True))
    assert await failing.fire_due(now=reminder.due_at) == 0
    outbox = Outbox()
    assert await (await service(reminder_store, outbox)).fire_due(now=reminder.due_at + timedelta(minutes=1)) == 0
    assert outbox.sent == []


async def test_repeating_reminders_move_to_their_next_time(reminder_store: ReminderStoreCase) -> None:
    outbox = Outbox()
    reminders = await service(reminder_store, outbox)
    reminder = await reminders.add("telegram:1", "telegram", "1", "stand-up", cron="0 9 * * 1-5")
    first = reminder.due_at
    await reminders.fire_due(now=first)
    assert (await reminders.pending("telegram:1"))[0].due_at > first
    assert (await reminders.pending("telegram:1"))[0].fired_count == 1


async def test_only_the_chat_that_asked_can_cancel(reminder_store: ReminderStoreCase) -> None:
    reminders = await service(reminder_store)
    reminder = await reminders.add("telegram:1", "telegram", "1", "mine", delay="1h")
    assert not await reminders.cancel("telegram:2", reminder.id)
    assert await reminders.cancel("telegram:1", reminder.id)
    with pytest.raises(InvalidReminder):
        await reminders.add("telegram:1", "telegram", "1", "past", at="2001-01-01T00:00")
    with pytest.raises(InvalidReminder):
        await reminders.add("telegram:1", "telegram", "1", "both", at="2030-01-01T00:00", delay="1h")


async def test_the_model_schedules_a_reminder_that_the_running_scheduler_delivers(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "stretch", "delay": "1s"}, id="call_r")]),
        "I'll remind you in a second.",
    )
    assert await say(services, channel, "1", "remind me to stretch in a second") == "I'll remind you in a second."
    assert "stretch" in await say(services, channel, "1", "/reminders")

    async def fire_due() -> None:
        await services.reminders.fire_due()

    services.scheduler.add_interval_job("reminders", 0.2, fire_due)
    await services.router.dispatcher.drain()  # everything handled, so the start finds nothing left over
    services.add_channels([channel])
    await services.start()
    replies = await channel.wait_for("1", 3, timeout=10)
    assert replies[2] == "⏰ Reminder: stretch"
    assert await say(services, channel, "1", "/reminders") == "No reminders are pending."
    session = await services.sessions.get("test:1")
    assert session is not None and "⏰ Reminder: stretch" in [m.content for m in session.messages]


async def test_a_new_reminder_check_interval_applies_without_a_restart(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    from tests.conftest import env_for

    config_file = workspace_dir / "preferences" / "runtime-config.json"
    config_file.parent.mkdir(parents=True)
    config_file.write_text('{"scheduler": {"reminderCheckSeconds": 300}}')
    app = Application(env_for(workspace_dir, fake_openai))
    try:
        app.add_channels([channel])
        await app.reminders.add("test:1", "test", "1", "stretch", delay="1s")
        await app.start()
        await asyncio.sleep(1.5)
        assert channel.sent["1"] == []  # due, but not looked for again for five minutes

        config_file.write_text('{"scheduler": {"reminderCheckSeconds": 1}}')
        os.utime(config_file, ns=(time.time_ns() + 10**9,) * 2)  # a change even within one timestamp tick
        assert (await channel.wait_for("1", 1, timeout=5)) == ["⏰ Reminder: stretch"]
    finally:
        await app.stop()


def test_cron_day_of_week_follows_standard_cron() -> None:
    monday_noon = datetime(2026, 11, 23, 11, 0, tzinfo=UTC)
    assert next_cron_time("0 9 * * 0", BERLIN, monday_noon).strftime("%a") == "Sun"
    assert next_cron_time("0 9 * * 7", BERLIN, monday_noon).strftime("%a") == "Sun"
    assert next_cron_time("0 9 * * 6", BERLIN, monday_noon).strftime("%a") == "Sat"
    assert next_cron_time("0 9 * * mon-fri", BERLIN, monday_noon).strftime("%a") == "Tue"
    assert next_cron_time("0 9 * * 1,3", BERLIN, monday_noon).strftime("%a") == "Wed"


async def test_the_bot_registers_its_background_jobs(services: Application) -> None:
    assert services.scheduler.job_names() == [
        "idle compaction", "memory maintenance", "rag indexing", "reminders", "runtime-config check"
    ]  # fmt: skip


async def test_a_bad_maintenance_schedule_is_refused_alone_and_the_default_runs(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    from tests.conftest import env_for

    (workspace_dir / "preferences").mkdir(parents=True)
    (workspace_dir / "preferences" / "runtime-config.json").write_text(
        '{"scheduler": {"maintenanceCron": "nightly", "idleCompactionMinutes": 5}}'
    )
    app = Application(env_for(workspace_dir, fake_openai))
    try:
        config = app.config_store.in_force().scheduler
        assert (config.maintenance_cron, config.idle_compaction_minutes) == ("30 3 * * *", 5)
        [problem] = app.config_store.problems()
        assert problem.key == "scheduler.maintenanceCron" and "5-field cron expression" in problem.problem
    finally:
        await app.stop()


async def test_processes_sharing_the_database_fire_a_reminder_once(postgres_database: str) -> None:
    processes = OpenDatabases(postgres_database)
    try:
        databases = [await processes.open() for _ in range(3)]
        await databases[0].fetch("DELETE FROM reminders RETURNING id")  # the module's other tests share the database
        outboxes = [Outbox() for _ in databases]
        replicas = [ReminderService(ReminderTable(db), BERLIN, "Europe/Berlin") for db in databases]
        for replica, outbox in zip(replicas, outboxes, strict=True):
            replica.connect(outbox, {"telegram"})
        reminder = await replicas[0].add("telegram:7", "telegram", "7", "once, whoever fires it", delay="1m")
        # A hand edit that left a row unreadable: it is logged and left, the others fire.
        await databases[0].fetch(
            "INSERT INTO reminders (id, session_id, channel_type, due_at, reminder)"
            " VALUES ('spoiled', 'telegram:7', 'telegram', now() - interval '1 hour', '{\"text\": 1}') RETURNING id"
        )
        moment = reminder.due_at + timedelta(seconds=1)
        sent = await asyncio.gather(*(replica.fire_due(now=moment) for replica in replicas))
        assert sorted(sent) == [0, 0, 1]
        assert [text for outbox in outboxes for _, _, text in outbox.sent] == ["⏰ Reminder: once, whoever fires it"]
        kept = [row["id"] for row in await databases[0].fetch("SELECT id FROM reminders")]
        assert kept == ["spoiled"]  # the unreadable row is kept, not deleted
    finally:
        await processes.close()


def _entry(reminder_id: str, **fields: object) -> dict[str, object]:
    """A reminders.json entry for the owner's test chat, as a person would copy one."""
    return {"id": reminder_id, "sessionId": "test:1", "channelType": "test", "chatId": "1", **fields}


async def test_a_hand_edited_reminders_file_keeps_what_it_cannot_read_and_fires_the_rest(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.conftest import env_for

    (workspace_dir / "preferences").mkdir(parents=True)
    (workspace_dir / "preferences" / "runtime-config.json").write_text('{"scheduler": {"reminderCheckSeconds": 1}}')
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    local_hour_ago = hour_ago.astimezone(BERLIN).replace(tzinfo=None).isoformat(timespec="minutes")
    slipped = [
        _entry("typo", txt="call mum", dueAt=hour_ago.isoformat()),
        _entry("weekly", text="bins", dueAt=hour_ago.isoformat(), cron="every monday"),
        "a stray line",
    ]
    (workspace_dir / "reminders.json").write_text(json.dumps([
        _entry("plants", text="water the plants", dueAt=hour_ago.isoformat()),
        slipped[0],
        _entry("cat", text="feed the cat", dueAt=local_hour_ago, timezone="Europe/Berlin"),  # no offset: Berlin's
        slipped[1],
        _entry("rent", text="pay the rent", dueAt=hour_ago.isoformat(), cron="0 9 31 2 *"),  # a day that never comes
        slipped[2],
    ]))  # fmt: skip
    caplog.set_level(logging.INFO)
    app = Application(env_for(workspace_dir, fake_openai, bot_timezone="Europe/Berlin"))
    try:
        app.add_channels([channel])
        await app.start()
        delivered = await channel.wait_for("1", 3, timeout=10)
        assert sorted(text.split("\n")[0] for text in delivered) == [
            "⏰ Reminder: feed the cat", "⏰ Reminder: pay the rent", "⏰ Reminder: water the plants"
        ]  # fmt: skip
        assert all("I was offline then, so it comes late" in text for text in delivered)

        fake_openai.script(
            Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "stretch", "delay": "1h"}, id="call_r")]),
            "I'll remind you in an hour.",
        )
        await say(app, channel, "1", "remind me to stretch in an hour")
        kept = json.loads((workspace_dir / "reminders.json").read_text())
        assert [entry["text"] for entry in kept if isinstance(entry, dict) and "text" in entry] == ["stretch", "bins"]
        assert [entry for entry in kept if entry in slipped] == slipped  # the slips, as the person wrote them
        assert "Entry 2 of" in caplog.text and "is unreadable (text: Field required" in caplog.text
        assert "Entry 4 of" in caplog.text and "'every monday' is not a 5-field cron expression" in caplog.text
        assert "Entry 6 of" in caplog.text
        assert "Reminder rent repeats no more: '0 9 31 2 *' never fires" in caplog.text
    finally:
        await app.stop()


def put_aside(folder: Path) -> list[Path]:
    return list(folder.glob("reminders.json.corrupt-*"))


async def test_a_reminders_file_that_is_no_json_list_is_moved_aside_not_written_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "reminders.json"
    path.write_text('[{"id": "a", "text": "half an edit"')
    reminders = ReminderService(ReminderFile(path), BERLIN, "Europe/Berlin")
    await reminders.load()
    await reminders.add("telegram:1", "telegram", "1", "new one", delay="1h")
    [aside] = put_aside(tmp_path)
    assert aside.read_text() == '[{"id": "a", "text": "half an edit"'
    assert [entry["text"] for entry in json.loads(path.read_text())] == ["new one"]
    assert f"is invalid JSON at line 1 column 36: Expecting ',' delimiter; moved to {aside.name}" in caplog.text


def test_a_cron_step_of_zero_is_a_clear_refusal() -> None:
    with pytest.raises(InvalidReminder, match="a step must be 1 or more"):
        next_cron_time("0 9 * * */0", BERLIN, datetime(2026, 11, 23, tzinfo=UTC))


class StalledOutbox(Outbox):
    """Delivers the first reminder, then waits (a chat's flood control) until the stop cancels it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()

    async def __call__(self, channel_type: str, chat_id: str, text: str) -> None:
        if self.sent:
            self.waiting.set()
            await asyncio.Event().wait()
        await super().__call__(channel_type, chat_id, text)


async def test_a_stop_in_the_middle_of_many_due_reminders_keeps_the_unsent_ones(
    reminder_store: ReminderStoreCase,
) -> None:
    reminders = await service(reminder_store)
    for minute in range(1, 6):
        await reminders.add("telegram:1", "telegram", "1", f"task {minute}", delay=f"{minute}m")
    standup = await reminders.add("telegram:1", "telegram", "1", "stand-up", cron="0 9 * * *")
    outbox = StalledOutbox()
    firing = await service(reminder_store, outbox)
    moment = standup.due_at + timedelta(seconds=1)
    run = asyncio.create_task(firing.fire_due(now=moment))
    await asyncio.wait_for(outbox.waiting.wait(), 5)
    run.cancel()  # the bot stops, its jobs are cancelled after their grace
    with pytest.raises(asyncio.CancelledError):
        await run

    after_start = Outbox()
    restarted = await service(reminder_store, after_start)
    assert await restarted.fire_due(now=moment + timedelta(minutes=1)) == 4  # the 5 due and the stand-up, less two
    delivered = [text.split("\n")[0] for _, _, text in outbox.sent + after_start.sent]
    assert len(delivered) == len(set(delivered)) == 5  # none twice; the one cut off while being sent is not repeated
    assert [r.text for r in await restarted.pending("telegram:1")] == ["stand-up"]  # repeating: its next time


async def test_the_model_is_told_in_words_what_a_reminder_time_lacks(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    from tests.conftest import env_for

    app = Application(env_for(workspace_dir, fake_openai, bot_timezone="Europe/Berlin"))
    try:
        asked = [
            {"text": "call the bank", "at": "2027-03-05"},  # "on Friday": midnight is not what was meant
            {"text": "renew the passport", "delay": "99999999d"},
            {"text": "water the plants", "cron": "0 9 * * */0"},
            {"text": "early train", "at": "2027-03-28T02:30"},  # the hour the clocks skip in Berlin
        ]
        fake_openai.script(
            Reply(tool_calls=[ToolCallSpec("schedule_reminder", args, id=f"r{n}") for n, args in enumerate(asked)]),
            "Done what I could.",
        )
        await say(app, channel, "1", "remind me of these")
        refused, skipped_hour = tool_results(fake_openai)[:3], tool_results(fake_openai)[3]
        assert refused == [
            "Error: '2027-03-05' has no time of day; give one, like 2027-03-05T09:00",
            "Error: '99999999d' is further ahead than a reminder can be",
            "Error: day of week '*/0': a step must be 1 or more",
        ]
        assert (
            skipped_hour.startswith("Scheduled [") and "2027-03-28 03:30 (Europe/Berlin): early train" in skipped_hour
        )
    finally:
        await app.stop()


@pytest.mark.parametrize("given", ["name", "copied file"])
async def test_with_no_bot_timezone_the_machines_zone_keeps_its_changes_of_the_clocks(
    given: str,
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from zoneinfo import TZPATH

    from tests.conftest import env_for

    if given == "name":
        monkeypatch.setenv("TZ", "Europe/Berlin")  # the machine's zone, as a service or a container names it
    else:
        # A zone file copied into place (as `cp /usr/share/zoneinfo/… /etc/localtime` leaves it), which carries
        # the zone's rules however it is named; TZ may name such a file as /etc/localtime is one.
        source = next(Path(folder) / "Europe" / "Berlin" for folder in TZPATH if (Path(folder) / "Europe").is_dir())
        copy = tmp_path / "zoneinfo" / "Europe" / "Berlin"
        copy.parent.mkdir(parents=True)
        copy.write_bytes(source.read_bytes())
        monkeypatch.setenv("TZ", str(copy))
    app = Application(env_for(workspace_dir, fake_openai, bot_timezone=None))
    try:
        calls = [
            ToolCallSpec("schedule_reminder", {"text": "winter train", "at": "2027-01-04T09:00"}, id="r1"),
            ToolCallSpec("schedule_reminder", {"text": "summer train", "at": "2027-07-05T09:00"}, id="r2"),
        ]
        fake_openai.script(Reply(tool_calls=calls), "Both are set.")
        await say(app, channel, "1", "remind me of both trains at nine")
        winter, summer = await app.reminders.pending("test:1")
        assert winter.due_at == datetime(2027, 1, 4, 8, tzinfo=UTC)  # nine in Berlin in winter
        assert summer.due_at == datetime(2027, 7, 5, 7, tzinfo=UTC)  # and in summer
        assert all(result.endswith("09:00 (Europe/Berlin): " + text) for result, text in
                   zip(tool_results(fake_openai), ["winter train", "summer train"], strict=True))  # fmt: skip
    finally:
        await app.stop()


async def test_migrate_copies_the_readable_reminders_and_counts_the_rest(
    postgres_database: str, tmp_path: Path
) -> None:
    from bot.setup.migrate import migrate_workspace
    from bot.workspace import Workspace

    workspace = Workspace(tmp_path / "workspace")
    workspace.root.mkdir(parents=True)
    hand_edited = json.dumps([
        _entry("plants", text="water the plants", dueAt="2031-05-01T08:00:00Z"),
        _entry("typo", txt="call mum", dueAt="2031-05-01T08:00:00Z"),
    ])  # fmt: skip
    workspace.reminders_file.write_text(hand_edited)
    databases = OpenDatabases(postgres_database)
    try:
        database = await databases.open()
        await database.fetch("DELETE FROM reminders RETURNING id")  # the module's other tests share the database
        copied = (await migrate_workspace(workspace, database)).line()
        assert "1 reminders, 1 reminder entries that cannot be read (left in the file; see the log)" in copied
        assert [row["id"] for row in await database.fetch("SELECT id FROM reminders")] == ["plants"]
        assert workspace.reminders_file.read_text() == hand_edited
    finally:
        await databases.close()


class ShutOut(Outbox):
    """A chat that refuses the bot's messages until `admit`."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = True
        self.tries = 0

    async def __call__(self, channel_type: str, chat_id: str, text: str) -> None:
        if self.refusing:
            self.tries += 1
            raise ChatUnreachable("Forbidden: bot was blocked by the user")
        await super().__call__(channel_type, chat_id, text)


async def test_reminders_a_chat_refused_are_kept_paused_and_resumed_when_it_writes(
    reminder_store: ReminderStoreCase,
) -> None:
    reminders = await service(reminder_store)
    daily = await reminders.add("telegram:1", "telegram", "1", "stand-up", cron="0 9 * * *")
    later = await reminders.add("telegram:1", "telegram", "1", "renew the passport", at="2040-01-01T10:00")
    store = await reminder_store.open()
    await store.load()
    once = Reminder(session_id="telegram:1", channel_type="telegram", chat_id="1", text="call mum",
                    due_at=utc_now() - timedelta(hours=1))  # fmt: skip
    await store.put(once)
    chat = ShutOut()
    assert await (await service(reminder_store, chat)).fire_due(now=daily.due_at) == 0

    restarted = await service(reminder_store, chat)  # a new process reads the paused reminders as they were kept
    kept = {r.id: r for r in await restarted.pending("telegram:1")}
    assert kept.keys() == {daily.id, once.id, later.id}
    paused = kept[daily.id]
    assert paused.paused_because == "Forbidden: bot was blocked by the user" and paused.fired_count == 0
    assert paused.due_at > daily.due_at and kept[once.id].due_at == once.due_at and kept[later.id].paused_at is None
    assert await restarted.fire_due(now=paused.due_at + timedelta(hours=1)) == 0  # passed over, not tried
    assert chat.tries == 2

    chat.refusing = False
    [resumed] = await restarted.resume("telegram:1")
    assert resumed.id == daily.id and resumed.paused_at is None
    assert chat.sent == [("telegram", "1", "\n".join([
        "While this chat took no messages from me, your reminders were paused.",
        "Due meanwhile:",
        f"⏰ call mum (due {once.due_at.astimezone(BERLIN):%Y-%m-%d %H:%M})",
        "They go on:",
        restarted.describe(resumed),
    ]))]  # fmt: skip
    assert [r.id for r in await restarted.pending("telegram:1")] == [daily.id, later.id]  # the one-off was told
    assert await restarted.resume("telegram:1") == []  # nothing more to resume, nothing said
    assert len(chat.sent) == 1
    assert await (await service(reminder_store, chat)).fire_due(now=resumed.due_at) == 1
    assert chat.sent[-1] == ("telegram", "1", "⏰ Reminder: stand-up")

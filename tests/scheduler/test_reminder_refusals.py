"""A repeating reminder for a chat that takes no message from the bot (blocked, account deleted, bot removed,
chat gone) is paused, kept, logged once, and resumed when the chat writes again; a passing failure (5xx,
flood control) pauses nothing. Through the Telegram channel on both backends, with the fake Bot API."""

from __future__ import annotations

import json
import logging
from datetime import UTC, time, timedelta

import pytest

from bot.domain.model import utc_now
from tests.channels.telegram_harness import GROUP, OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.telegram_server import BOT_BLOCKED, BOT_KICKED, CHAT_NOT_FOUND, USER_DEACTIVATED, FakeTelegram, Fault

# Each test fires the reminders itself, at their times (tomorrow and later: the scheduler's own check finds none).
NOT_BY_ITSELF = {"scheduler": {"reminderCheckSeconds": 300}}


def reason(refusal: str) -> str:
    """Telegram's reason as both libraries keep it (PTB drops the "Bad Request: " and capitalises the rest)."""
    return refusal.split(": ", 1)[1].lower()


async def set_daily_reminder(fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, chat: int) -> None:
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "water the plants", "cron": "0 9 * * *"})]),
        "Every morning at nine.",
    )
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, "@test_bot remind us to water the plants every morning")
    assert (await fake_telegram.await_messages(chat, before + 1))[-1].text == "Every morning at nine."


@pytest.mark.parametrize(
    ("chat", "refusal"),
    [(OWNER, BOT_BLOCKED), (OWNER, USER_DEACTIVATED), (GROUP, BOT_KICKED), (OWNER, CHAT_NOT_FOUND)],
)
async def test_a_repeating_reminder_to_a_chat_that_shuts_the_bot_out_is_paused_until_the_chat_writes(
    start: BotFactory,
    fake_telegram: FakeTelegram,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    chat: int,
    refusal: str,
) -> None:
    bot = await start(NOT_BY_ITSELF)
    reminders, session_id = bot.app.reminders, f"telegram:{chat}"
    await set_daily_reminder(fake_telegram, fake_openai, chat)
    [reminder] = await reminders.pending(session_id)
    fake_telegram.refuse_chat(chat, refusal)

    caplog.set_level(logging.INFO)
    assert await reminders.fire_due(now=reminder.due_at) == 0
    [paused] = await reminders.pending(session_id)
    assert paused.id == reminder.id and paused.paused_at == reminder.due_at
    assert paused.due_at > reminder.due_at  # its next morning, kept
    kept = json.loads((bot.workspace / "reminders.json").read_text())
    assert [entry["id"] for entry in kept] == [reminder.id] and reason(refusal) in kept[0]["pausedBecause"].lower()
    assert "paused since" in reminders.describe(paused) and "a message here resumes it" in reminders.describe(paused)
    tries = len(fake_telegram.calls_to("sendMessage"))
    assert await reminders.fire_due(now=paused.due_at) == 0  # its next morning: not tried again
    assert len(fake_telegram.calls_to("sendMessage")) == tries
    [logged] = [r.getMessage() for r in caplog.records if reminder.id in r.getMessage()]  # once
    assert logged.startswith(f"[Scheduler] Reminder {reminder.id} is paused: chat {chat} refuses the bot's messages (")
    assert reason(refusal) in logged.lower() and logged.endswith(
        "). It is kept, and resumes when the chat writes to the bot again"
    )

    # Unblocked (added back), the chat writes: told that the reminder goes on, then answered.
    fake_telegram.admit_chat(chat)
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, "@test_bot hello again")
    notice, reply = [m.text for m in (await fake_telegram.await_messages(chat, before + 2))[before:]]
    [resumed] = await reminders.pending(session_id)
    assert resumed.paused_at is None  # from the next morning after now on
    assert utc_now() < resumed.due_at <= utc_now() + timedelta(days=1) and resumed.due_at.timetz() == time(
        9, tzinfo=UTC
    )
    assert notice == (
        "While this chat took no messages from me, your reminders were paused.\nThey go on:\n"
        + reminders.describe(resumed)
    )
    assert reply.startswith("echo: ") and reply.endswith("hello again")
    assert await reminders.fire_due(now=resumed.due_at) == 1
    assert fake_telegram.sent_messages(chat)[-1].text == "⏰ Reminder: water the plants"


@pytest.mark.parametrize("fault", [Fault.server_error(502), Fault.rate_limit(retry_after=600)])
async def test_a_passing_failure_pauses_nothing(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, fault: Fault
) -> None:
    bot = await start(NOT_BY_ITSELF)
    reminders = bot.app.reminders
    await set_daily_reminder(fake_telegram, fake_openai, OWNER)
    [reminder] = await reminders.pending(f"telegram:{OWNER}")
    fake_telegram.fail_next("sendMessage", fault, times=10)
    assert await reminders.fire_due(now=reminder.due_at) == 0
    [waiting] = await reminders.pending(f"telegram:{OWNER}")
    assert waiting.paused_at is None and waiting.due_at > reminder.due_at
    fake_telegram.clear_faults()
    assert await reminders.fire_due(now=waiting.due_at) == 1
    assert fake_telegram.sent_messages(OWNER)[-1].text == "⏰ Reminder: water the plants"

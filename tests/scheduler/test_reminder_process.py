"""A reminder asked for on Telegram arrives at its time, once, although the bot process restarted
in between: the real `python -m bot run` against the fake Telegram Bot API and the fake model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.channels.telegram_harness import OWNER
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.telegram_server import FakeTelegram

REMINDER = "⏰ Reminder: stretch your legs"


def start_bot_process(workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace), BOT_TIMEZONE="UTC", OPENAI_BASE_URL=fake_openai.base_url,
        OPENAI_API_KEY=TEST_API_KEY, TELEGRAM_BOT_TOKEN=fake_telegram.token, TELEGRAM_API_BASE_URL=fake_telegram.root,
    )  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0


def reminders_seen(fake_telegram: FakeTelegram) -> int:
    return sum(message.text == REMINDER for message in fake_telegram.sent_messages(OWNER))


def pending_reminders(workspace: Path) -> list[object]:
    reminders = json.loads((workspace / "reminders.json").read_text())
    assert isinstance(reminders, list)
    return reminders


def test_a_reminder_survives_a_restart_and_arrives_once(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps({
        "access": {"allowedUsers": [OWNER]},
        "telegram": {"pollingTimeoutSeconds": 1},
        "scheduler": {"reminderCheckSeconds": 1},
        "rag": {"enabled": False},
        "toolLoop": {"streaming": False},
    }))  # fmt: skip
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "stretch your legs", "delay": "10s"}, id="c1")]),
        "I'll remind you in ten seconds.",
    )
    first = start_bot_process(workspace, fake_openai, fake_telegram)
    try:
        fake_telegram.push_message(OWNER, "remind me to stretch my legs in ten seconds")
        replies = fake_telegram.wait_for_messages(OWNER, 1, timeout=30)
        assert replies[0].text == "I'll remind you in ten seconds."
    finally:
        stop(first)
    assert reminders_seen(fake_telegram) == 0
    assert json.loads((workspace / "reminders.json").read_text())[0]["text"] == "stretch your legs"

    second = start_bot_process(workspace, fake_openai, fake_telegram)
    try:
        fake_telegram.wait_until(lambda: reminders_seen(fake_telegram) >= 1, timeout=30, what="the reminder")
        # Once it is out of the file no scheduler round can send it again; the stop lets a send begun finish.
        fake_telegram.wait_until(lambda: pending_reminders(workspace) == [], timeout=30, what="the reminder settled")
    finally:
        stop(second)
    assert reminders_seen(fake_telegram) == 1
    assert pending_reminders(workspace) == []

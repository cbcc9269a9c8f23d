"""SIGTERM while answers are in progress: the bot exits within 10 s, leaves whole files, and answers
what it cut short after the restart, once.

A chat has a slow answer in progress and a second message waiting behind it; another chat was answered
already. The shutdown waits a bounded time for the slow answer, then cancels it; both of that chat's
messages stay journaled and are answered, in order, by the next start.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bot.storage.jsonl import read_jsonl_sync
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_responder
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.bot_process import bad_log_lines, start_bot, stop

SLOW_CHAT, QUICK_CHAT = 81_001, 81_002
STOP_LIMIT_SECONDS = 10.0


def slow_for_the_first_start(body: dict[str, Any]) -> Reply:
    reply = echo_responder(body)
    return Reply(text=reply.text, delay=60.0 if reply.text == "echo: a long question" else 0.0)


@pytest.mark.parametrize("backend", ["ptb", "aiogram"])
def test_sigterm_mid_answer_exits_in_time_and_the_restart_answers_once(tmp_path: Path, backend: str) -> None:
    workspace, log = tmp_path / "workspace", tmp_path / "bot-stderr.log"
    config = {"access": {"allowedUsers": [SLOW_CHAT, QUICK_CHAT]}, "telegram": {"pollingTimeoutSeconds": 1}}
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.set_responder(slow_for_the_first_start)
        process = start_bot(workspace, backend, model, telegram, log, config)
        try:
            telegram.push_message(QUICK_CHAT, "hello")
            telegram.wait_for_messages(QUICK_CHAT, 1, timeout=60)
            telegram.push_message(SLOW_CHAT, "a long question")
            telegram.push_message(SLOW_CHAT, "and a follow-up")
            telegram.wait_until(lambda: len(model.chat_requests()) == 2, 30, "the slow answer to begin")
            telegram.wait_until(lambda: telegram.pending_update_count() == 0, 10, "both messages to be taken")

            started = time.monotonic()
            stop(process, timeout=STOP_LIMIT_SECONDS + 5)
            assert time.monotonic() - started < STOP_LIMIT_SECONDS
            assert process.returncode == 0
        finally:
            if process.poll() is None:
                process.kill()
        assert bad_log_lines(log) == []
        assert telegram.visible_text(SLOW_CHAT) == []
        session = json.loads((workspace / "sessions" / f"telegram:{SLOW_CHAT}.json").read_text())
        assert [m["content"] for m in session["messages"] if m["role"] == "user"] == ["a long question"]
        assert len(read_jsonl_sync(workspace / "state" / "turns.jsonl")) >= 2  # both received, neither delivered

        model.set_responder(echo_responder)
        process = start_bot(workspace, backend, model, telegram, log, config)
        try:
            telegram.wait_for_messages(SLOW_CHAT, 2, timeout=60)
            telegram.wait_until(lambda: telegram.pending_update_count() == 0, what="every update acknowledged")
        finally:
            stop(process)  # a clean stop lets every turn begun finish: a reply sent twice is sent by then
        assert telegram.visible_text(SLOW_CHAT) == ["echo: a long question", "echo: and a follow-up"]
        assert telegram.visible_text(QUICK_CHAT) == ["echo: hello"]
        assert process.returncode == 0
        assert bad_log_lines(log) == []


def test_stop_is_quick_when_nothing_is_running(tmp_path: Path) -> None:
    workspace, log = tmp_path / "workspace", tmp_path / "bot-stderr.log"
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        process = start_bot(workspace, "ptb", model, telegram, log, {"access": {"allowedUsers": [QUICK_CHAT]}})
        try:
            telegram.push_message(QUICK_CHAT, "hello")
            telegram.wait_for_messages(QUICK_CHAT, 1, timeout=60)
            started = time.monotonic()
            stop(process)
            assert time.monotonic() - started < 3.0
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        assert process.returncode == 0

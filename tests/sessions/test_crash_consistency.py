"""A process killed at any moment while saving leaves a whole, valid session file every time, and loses
no message whose save had returned."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

from bot.domain.session import AgentSession
from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles
from bot.storage.jsonl import read_jsonl_sync

KILLS = 25


def test_sigkill_while_saving_never_leaves_a_broken_session(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    chance = random.Random(2026)
    previous_archive_lines = 0
    for _ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.sessions.crash_writer", str(folder)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline().strip() == "saving"
        time.sleep(chance.uniform(0.0, 0.15))
        writer.kill()
        writer.wait()

        text = (folder / "telegram:42.json").read_text(encoding="utf-8")
        session = AgentSession.model_validate_json(text)  # whole and valid, every time
        archive = read_jsonl_sync(folder / "archive" / "telegram:42.jsonl")
        archived_ids = {record["id"] for record in archive}
        # Everything the live session holds was archived first.
        assert {m.id for m in session.messages} <= archived_ids
        # The archive only grows; nothing earlier is lost by a later crash.
        assert len(archive) >= previous_archive_lines
        previous_archive_lines = len(archive)
    assert previous_archive_lines > KILLS  # the writer really was writing when it was killed


def test_sigkill_while_a_long_session_is_saved_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """The long session's file lags behind the archive; whatever moment the kill comes, a restart finds
    every message whose save had returned, once each and in order."""
    folder = tmp_path / "sessions"
    chance = random.Random(1125)
    acknowledged: list[str] = []
    kills_with_the_file_behind = 0
    for _ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.sessions.crash_writer", str(folder), "long"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        acknowledged.append(writer.stdout.readline().split()[1])
        time.sleep(chance.uniform(0.0, 0.15))
        writer.kill()
        # A line the kill cut short (no newline yet) was never acknowledged.
        acknowledged += [line.split()[1] for line in writer.stdout.read().split("\n")[:-1]]
        writer.wait()

        in_file = AgentSession.model_validate_json((folder / "telegram:42.json").read_text(encoding="utf-8"))
        session = asyncio.run(SessionService(SessionFiles(folder)).get_or_create("telegram", "42"))
        kills_with_the_file_behind += len(in_file.messages) < len(session.messages)
        ids = [message.id for message in session.messages]
        assert len(ids) == len(set(ids))
        position = {message_id: index for index, message_id in enumerate(ids)}
        assert all(message_id in position for message_id in acknowledged)
        assert [position[message_id] for message_id in acknowledged] == sorted(position[m] for m in acknowledged)
    assert len(acknowledged) > KILLS
    assert kills_with_the_file_behind > KILLS // 2  # the archive really held what the file did not

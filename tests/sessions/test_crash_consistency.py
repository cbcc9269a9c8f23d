"""A process killed at any moment while saving leaves a whole, valid session file every time."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

from bot.domain.session import AgentSession
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

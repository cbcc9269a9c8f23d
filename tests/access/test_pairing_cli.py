"""`python -m bot pairing list` / `approve CODE`, as the owner runs them next to the running bot."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from bot.access.pairing import PairingStore, pairing_file


def run_cli(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env["BOT_WORKSPACE"] = str(workspace)
    return subprocess.run(
        [sys.executable, "-m", "bot", "pairing", *args], env=env, capture_output=True, text=True, timeout=60
    )


async def test_list_and_approve(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    store = PairingStore(pairing_file(workspace))
    request = await store.request(777, "bob", timedelta(hours=1), max_pending=5)
    assert request is not None

    listed = run_cli(workspace, "list")
    assert listed.returncode == 0, listed.stderr
    assert request.code in listed.stdout and "777" in listed.stdout and "@bob" in listed.stdout

    approved = run_cli(workspace, "approve", request.code)
    assert approved.returncode == 0, approved.stderr
    assert "Approved user 777 (@bob)" in approved.stdout
    assert await store.approved_ids() == frozenset({777})
    assert "No pending pairing requests" in run_cli(workspace, "list").stdout

    unknown = run_cli(workspace, "approve", "NOPE1234")
    assert unknown.returncode == 1 and "No pending pairing request" in unknown.stderr

"""`python -m bot pairing list` / `approve CODE`, as the owner runs them next to the running bot."""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import timedelta
from pathlib import Path

from bot.access.pairing import PairingStore, pairing_file
from tests.command_line import run_main


async def run_cli(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command in the test's process, off its event loop (the command runs a loop of its own)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env["BOT_WORKSPACE"] = str(workspace)
    return await asyncio.to_thread(run_main, ["pairing", *args], env, workspace.parent)


async def test_list_and_approve(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    store = PairingStore(pairing_file(workspace))
    request = await store.request(777, "bob", timedelta(hours=1), max_pending=5)
    assert request is not None

    listed = await run_cli(workspace, "list")
    assert listed.returncode == 0, listed.stderr
    assert request.code in listed.stdout and "777" in listed.stdout and "@bob" in listed.stdout

    approved = await run_cli(workspace, "approve", request.code)
    assert approved.returncode == 0, approved.stderr
    assert "Approved user 777 (@bob)" in approved.stdout
    assert await store.approved_ids() == frozenset({777})
    assert "No pending pairing requests" in (await run_cli(workspace, "list")).stdout

    unknown = await run_cli(workspace, "approve", "NOPE1234")
    assert unknown.returncode == 1 and "No pending pairing request" in unknown.stderr

"""Writes that leave their fsync for later are on disk for every reader at once, and durable by the next
round: the periodic one, the one a durable write asks for, or the stop's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.app import Application
from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, write_atomic
from tests.fakes.recording_channel import RecordingChannel


async def test_a_deferred_write_is_read_back_at_once_and_waits_for_the_next_round(tmp_path: Path) -> None:
    deferred = DeferredSync()
    notes = tmp_path / "memory" / "2026-11-25.md"
    await append_lines(notes, ["[10:00] User: hi | Assistant: hello"], deferred)
    await write_atomic(tmp_path / "session.json", b'{"messages": []}', deferred)

    assert notes.read_text() == "[10:00] User: hi | Assistant: hello\n"
    assert (tmp_path / "session.json").read_bytes() == b'{"messages": []}'
    # Both files, and both folders whose entries they created.
    assert deferred.pending == 4
    await deferred.sync()
    assert deferred.pending == 0


async def test_a_file_gone_before_its_round_is_skipped(tmp_path: Path) -> None:
    deferred = DeferredSync()
    path = tmp_path / "gone.jsonl"
    await append_lines(path, ["{}"], deferred)
    path.unlink()
    await deferred.sync()
    assert deferred.pending == 0


async def test_the_running_loop_makes_marked_files_durable_within_its_interval(tmp_path: Path) -> None:
    deferred = DeferredSync(interval=0.05)
    syncing = asyncio.create_task(deferred.run())
    try:
        await append_lines(tmp_path / "a.jsonl", ["{}"], deferred)
        for _ in range(100):
            if not deferred.pending:
                break
            await asyncio.sleep(0.01)
        assert deferred.pending == 0
    finally:
        syncing.cancel()


async def test_a_turn_leaves_its_derived_writes_to_the_round_and_the_stop_makes_them_durable(
    services: Application, channel: RecordingChannel
) -> None:
    await services.router.accept(channel.message("1", "my sister lives in Porto"), channel)
    assert await channel.wait_for("1", 1) == ["echo: my sister lives in Porto"]
    await services.router.dispatcher.drain()
    # The session file, the daily note, the memory item and the ledger's `delivered` wait for the round.
    assert services.deferred_sync.pending > 0
    await services.stop()
    assert services.deferred_sync.pending == 0

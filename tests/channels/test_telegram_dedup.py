"""`SeenUpdates`: an update id is handed over once, also across a restart."""

from __future__ import annotations

import json
from pathlib import Path

from bot.channels.telegram_dedup import SeenUpdates


async def test_an_update_is_seen_once_and_remembered_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state" / "telegram-updates.json"
    seen = SeenUpdates(path)
    await seen.load()
    assert [seen.check_and_mark(n) for n in (5, 6, 5, 7, 6)] == [False, False, True, False, True]
    await seen.close()
    assert json.loads(path.read_text()) == {"seenUpdateIds": [5, 6, 7]}

    after_restart = SeenUpdates(path)
    await after_restart.load()
    assert after_restart.check_and_mark(6) is True
    assert after_restart.check_and_mark(8) is False
    await after_restart.close()


async def test_the_window_is_bounded_and_older_ids_count_as_seen(tmp_path: Path) -> None:
    seen = SeenUpdates(tmp_path / "seen.json", capacity=3)
    for update_id in (10, 11, 12, 13):
        assert seen.check_and_mark(update_id) is False
    assert seen.check_and_mark(10) is True  # fell out of the window, older than all remembered
    assert seen.check_and_mark(9) is True
    await seen.close()
    assert json.loads((tmp_path / "seen.json").read_text()) == {"seenUpdateIds": [11, 12, 13]}


async def test_an_unreadable_file_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "seen.json"
    path.write_text("{not json")
    seen = SeenUpdates(path)
    await seen.load()
    assert seen.check_and_mark(1) is False
    await seen.close()

"""`FolderChanges` names the files changed in a watched folder since it was last asked, and says "check
them all" whenever it cannot know: the first time, lost events, an unwatchable folder, and every
`FULL_SCAN_SECONDS`."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

from bot.storage.folder_changes import FULL_SCAN_SECONDS, FolderChanges

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_check_is_whole_then_only_what_changed_is_named(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    old, other = tmp_path / "2025-01-01.jsonl", tmp_path / "2025-01-02.jsonl"
    old.write_text("{}\n")
    other.write_text("{}\n")

    assert changes.changed(tmp_path)[0] is None  # watched from now: what came before is unknown
    assert changes.changed(tmp_path)[0] == set()
    with old.open("r+b") as handle:  # an edit in place, same size
        handle.write(b"[]")
    assert changes.changed(tmp_path)[0] == {old}
    assert changes.changed(tmp_path)[0] == set()


def test_an_editor_saving_by_rename_a_touch_a_delete_and_a_new_file_are_named(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    edited, touched, deleted = (tmp_path / f"{name}.jsonl" for name in ("edited", "touched", "deleted"))
    for path in (edited, touched, deleted):
        path.write_text("{}\n")
    changes.changed(tmp_path)

    (tmp_path / ".edited.jsonl.swp").write_text('{"a": 1}\n')
    os.replace(tmp_path / ".edited.jsonl.swp", edited)
    os.utime(touched, ns=(1, 1))
    deleted.unlink()
    (tmp_path / "new.jsonl").write_text("{}\n")

    swap, new = tmp_path / ".edited.jsonl.swp", tmp_path / "new.jsonl"
    assert changes.changed(tmp_path)[0] == {edited, swap, touched, deleted, new}


def test_each_folder_has_its_own_names(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    changes.changed(first)
    changes.changed(second)

    (first / "one.jsonl").write_text("{}\n")
    (second / "two.jsonl").write_text("{}\n")

    assert changes.changed(second)[0] == {second / "two.jsonl"}
    assert changes.changed(first)[0] == {first / "one.jsonl"}
    (first / "one.jsonl").write_text("{}\n{}\n")
    (second / "three.jsonl").write_text("{}\n")
    assert changes.changed(first, second) == [{first / "one.jsonl"}, {second / "three.jsonl"}]  # one read of the events
    assert changes.changed(first, second) == [set(), set()]


def test_a_folder_missing_then_made_is_checked_whole_until_watched(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    folder = tmp_path / "episodic"

    assert changes.changed(folder)[0] is None
    assert changes.changed(folder)[0] is None
    folder.mkdir()
    assert changes.changed(folder)[0] is None  # watched from now on
    (folder / "day.jsonl").write_text("{}\n")
    assert changes.changed(folder)[0] == {folder / "day.jsonl"}


def test_a_folder_deleted_or_moved_away_is_checked_whole_again(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    folder = tmp_path / "items"
    folder.mkdir()
    changes.changed(folder)

    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "semantic.jsonl").write_text("{}\n")

    assert changes.changed(folder)[0] is None  # the watch went with the old folder
    (folder / "semantic.jsonl").write_text("{}\n")
    assert changes.changed(folder)[0] == {folder / "semantic.jsonl"}


def test_a_folder_is_checked_whole_every_so_often_for_what_no_event_tells(tmp_path: Path) -> None:
    # A network file system has no events for another machine's writes.
    clock = Clock()
    changes = FolderChanges(clock)
    changes.changed(tmp_path)

    clock.now += FULL_SCAN_SECONDS - 1
    assert changes.changed(tmp_path)[0] == set()
    clock.now += 1
    assert changes.changed(tmp_path)[0] is None
    assert changes.changed(tmp_path)[0] == set()


def test_after_close_the_next_check_is_whole(tmp_path: Path) -> None:
    changes = FolderChanges(Clock())
    changes.changed(tmp_path)
    changes.close()

    (tmp_path / "x.jsonl").write_text("{}\n")

    assert changes.changed(tmp_path)[0] is None
    assert changes.changed(tmp_path)[0] == set()


def test_a_folder_that_cannot_be_watched_is_checked_whole_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What the watch limit does (ENOSPC), shown with a file where a folder should be (ENOTDIR).
    not_a_folder = tmp_path / "items"
    not_a_folder.write_text("")
    changes = FolderChanges(Clock())
    caplog.set_level(logging.INFO, logger="bot.storage.folder_changes")

    assert [changes.changed(not_a_folder)[0] for _ in range(3)] == [None, None, None]
    assert len([r for r in caplog.records if "Cannot watch" in r.getMessage()]) == 1
    assert changes.changed(tmp_path)[0] is None and changes.changed(tmp_path)[0] == set()  # the others still are

"""`append_lines`, the append every log of the bot goes through (turn ledger, archive, notes, items): whole
lines at the end, a torn JSONL record a crash left cut off first, a line saved by hand without its newline
kept and ended, a private file in a folder made if missing."""

from __future__ import annotations

import stat
from pathlib import Path

from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, read_lines_from_sync, whole_lines_size_sync


async def test_lines_go_at_the_end_of_a_private_file_in_a_folder_made_for_it(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "log.jsonl"

    first = await append_lines(path, ['{"a": 1}', '{"b": "two\\n"}\n'])
    second = await append_lines(path, ["ünïcode ✓"])

    assert path.read_bytes() == '{"a": 1}\n{"b": "two\\n"}\nünïcode ✓\n'.encode()
    assert (first, second) == (24, path.stat().st_size)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert await append_lines(path, []) == 0 and path.stat().st_size == second


async def test_a_torn_tail_is_cut_before_the_append_and_nothing_whole_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    path.write_bytes(b'{"whole": 1}\n{"whole": 2}\n{"torn": ')

    size = await append_lines(path, ['{"next": 3}'])

    assert path.read_bytes() == b'{"whole": 1}\n{"whole": 2}\n{"next": 3}\n'
    assert size == path.stat().st_size


async def test_a_torn_line_longer_than_one_read_is_cut_whole(tmp_path: Path) -> None:
    path = tmp_path / "archive.jsonl"
    path.write_bytes(b"kept\n" + b"x" * 10_000)  # the fragment spans three 4 KiB reads back

    assert whole_lines_size_sync(path) == 5
    await append_lines(path, ["after"])

    assert path.read_bytes() == b"kept\nafter\n"
    assert read_lines_from_sync(path, 7) == "after\n"  # from the start of the line holding byte 7


async def test_a_file_that_held_only_a_fragment_counts_as_new_for_its_folders_fsync(tmp_path: Path) -> None:
    deferred = DeferredSync()
    fragment, whole = tmp_path / "fragment.md", tmp_path / "whole.md"
    fragment.write_bytes(b"[10:00] User: half a li")
    whole.write_bytes(b"[09:00] User: hi | Assistant: hello\n")
    await deferred.sync()

    await append_lines(whole, ["[10:01] User: and | Assistant: so"], deferred)
    assert deferred.pending == 1  # the file only: its folder's entry was there already
    await append_lines(fragment, ["[10:02] User: again | Assistant: yes"], deferred)

    assert fragment.read_text() == "[10:00] User: half a li\n[10:02] User: again | Assistant: yes\n"
    assert deferred.pending == 3  # and the folder, as for a file made now


async def test_a_last_line_saved_by_hand_without_its_newline_is_kept(tmp_path: Path) -> None:
    note, items = tmp_path / "2026-01-02.md", tmp_path / "semantic.jsonl"
    note.write_bytes(b"[09:00] User: hi | Assistant: hello\nAdded by hand: call the dentist on Friday")
    items.write_bytes(b'{"id": "m1"}\n{"id": "m2", "content": "typed by hand"}')

    assert whole_lines_size_sync(note) == note.stat().st_size + 1
    size = await append_lines(note, ["[10:00] User: and | Assistant: so"])
    await append_lines(items, ['{"id": "m3"}'])

    assert note.read_text().splitlines() == [
        "[09:00] User: hi | Assistant: hello",
        "Added by hand: call the dentist on Friday",
        "[10:00] User: and | Assistant: so",
    ]
    assert size == note.stat().st_size
    assert items.read_bytes() == b'{"id": "m1"}\n{"id": "m2", "content": "typed by hand"}\n{"id": "m3"}\n'

"""`TextFileCache`: MEMORY.md and the notes as they are on disk, with or without the folder's events."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.memory import file_cache
from bot.memory.file_cache import TextFileCache
from bot.storage.files import FileSignature, file_signature
from bot.storage.folder_changes import FolderChanges


@pytest.fixture(params=["watched", "stat"])
def cache(request: pytest.FixtureRequest) -> Iterator[TextFileCache]:
    changes = FolderChanges() if request.param == "watched" else None
    yield TextFileCache(changes)
    if changes is not None:
        changes.close()


def later(path: Path) -> None:
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


async def test_every_change_is_read_on_the_next_read(cache: TextFileCache, tmp_path: Path) -> None:
    memory, note = tmp_path / "MEMORY.md", tmp_path / "2026-03-01.md"
    memory.write_text("Tea, no sugar.\n")
    assert await cache.read(memory) == "Tea, no sugar.\n"
    assert await cache.read(note) is None
    assert await cache.read(memory) == "Tea, no sugar.\n"

    memory.write_text("Tea, no honey.\n")  # in place, same size
    later(memory)
    note.write_text("[09:00] User: hi | Assistant: hello\n")  # made after it was found missing
    assert await cache.read(memory) == "Tea, no honey.\n"
    assert await cache.read(note) == "[09:00] User: hi | Assistant: hello\n"

    replacement = tmp_path / ".MEMORY.md.swp"
    replacement.write_text("Coffee.\n")
    os.replace(replacement, memory)  # an editor's save
    note.unlink()
    assert await cache.read(memory) == "Coffee.\n"
    assert await cache.read(note) is None


async def test_unchanged_files_are_not_even_looked_at_while_the_folder_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changes = FolderChanges()
    cache = TextFileCache(changes)
    memory = tmp_path / "MEMORY.md"
    memory.write_text("Tea.\n")
    days = [tmp_path / f"2026-03-0{day}.md" for day in range(1, 8)]  # a week without notes
    looked_at: list[Path] = []

    def counted(path: Path) -> FileSignature | None:
        looked_at.append(path)
        return file_signature(path)

    monkeypatch.setattr(file_cache, "file_signature", counted)
    for _ in range(2):  # the first read of each, and the first after the folder is watched
        for path in (memory, *days):
            await cache.read(path)
    looked_at.clear()
    for _ in range(3):
        assert await cache.read(memory) == "Tea.\n"
        assert [await cache.read(day) for day in days] == [None] * 7
    assert looked_at == []
    memory.write_text("Coffee.\n")
    assert await cache.read(memory) == "Coffee.\n"
    assert looked_at == [memory]
    changes.close()


class CountedChanges(FolderChanges):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def changed(self, *folders: Path) -> list[set[Path] | None]:
        self.asked += 1
        return super().changed(*folders)


async def test_a_week_of_notes_is_read_with_one_look_at_the_events_and_an_unreadable_day_in_its_place(
    tmp_path: Path,
) -> None:
    changes = CountedChanges()
    cache = TextFileCache(changes)
    days = [tmp_path / f"2026-03-0{day}.md" for day in range(1, 8)]
    days[0].write_text("[09:00] User: hi | Assistant: hello\n")
    days[3].mkdir()  # a day's note that cannot be read
    await cache.read_all(days)
    changes.asked = 0

    texts = await cache.read_all(days)
    assert changes.asked == 1
    assert texts[0] == "[09:00] User: hi | Assistant: hello\n"
    assert isinstance(texts[3], IsADirectoryError)
    assert texts[1:3] + texts[4:] == [None] * 5

    days[6].write_text("[10:00] User: later | Assistant: ok\n")  # a change is seen by the next batch
    assert (await cache.read_all(days))[6] == "[10:00] User: later | Assistant: ok\n"
    changes.close()

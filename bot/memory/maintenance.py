"""Memory maintenance, run nightly by the scheduler (`scheduler.maintenanceCron`) over every memory
root: salience decay, promotion of confident episodic facts, merging of duplicate items, dropping
superseded history past `memory.historyRetentionDays`, and moving daily notes older than
`memory.noteRetentionDays` into a monthly `archive/YYYY-MM.md`.

Every file is rewritten atomically, and a note is deleted only after the monthly file holding it is
on disk (a rerun after a crash sees the day's heading there and does not add it twice), so a run
killed at any moment leaves every file whole and loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, fields
from datetime import date, datetime, timedelta
from pathlib import Path

from bot.memory.scopes import MemoryScope
from bot.memory.service import MemoryService
from bot.settings import MemoryConfig
from bot.storage.files import read_text_sync, write_atomic_sync

log = logging.getLogger(__name__)

_NOTE_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
ARCHIVE_DIR = "archive"


@dataclass
class MaintenanceReport:
    """What one run changed."""

    decayed: int = 0
    promoted: int = 0
    merged: int = 0
    history_dropped: int = 0
    notes_archived: int = 0

    def add(self, other: MaintenanceReport) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def describe(self) -> str:
        return ", ".join(f"{field.name.replace('_', ' ')} {getattr(self, field.name)}" for field in fields(self))


async def run_maintenance(memory: MemoryService, config: MemoryConfig, now: datetime) -> MaintenanceReport:
    """Maintain every memory root (in the workspace, or in the database); returns what changed."""
    report = MaintenanceReport()
    for scope in await memory.every_scope():
        report.add(await _maintain_scope(memory, scope, config, now))
    log.info("[Memory] Maintenance: %s", report.describe())
    return report


async def _maintain_scope(
    memory: MemoryService, scope: MemoryScope, config: MemoryConfig, now: datetime
) -> MaintenanceReport:
    report = MaintenanceReport()

    def maintain() -> None:
        writer = scope.writer
        if config.decay_enabled:
            report.decayed = writer.decay(now, config, scope.accessed)
            scope.accessed.clear()
            scope.last_decay = now.date()
        if config.promotion_enabled:
            report.promoted = writer.promote_due(now, config)
        report.merged = writer.merge_duplicates(now)
        report.history_dropped = writer.drop_old_history(now, config.history_retention_days)

    async with memory.fresh(scope):
        # Every item is read (and many rewritten): in memory's thread, so replies meanwhile are not held up
        # beyond the scope's lock.
        await memory.off_loop_if_large(scope, maintain)
    await scope.store.flush()
    if config.note_retention_days:
        cutoff = now.date() - timedelta(days=config.note_retention_days)
        report.notes_archived = await asyncio.to_thread(archive_old_notes, scope.paths.root, cutoff)
    return report


def archive_old_notes(root: Path, cutoff: date) -> int:
    """Move daily notes dated before `cutoff` into `archive/YYYY-MM.md`, one `## YYYY-MM-DD` section each."""
    moved = 0
    for note in sorted(root.glob("*.md")):
        match = _NOTE_FILE.match(note.name)
        if match is None or date.fromisoformat(match.group(1)) >= cutoff:
            continue
        day = match.group(1)
        monthly = root / ARCHIVE_DIR / f"{day[:7]}.md"
        existing = read_text_sync(monthly) or ""
        heading = f"## {day}\n"
        if heading not in existing:
            text = (read_text_sync(note) or "").rstrip("\n")
            write_atomic_sync(monthly, f"{existing}{heading}{text}\n\n".encode())
        note.unlink()
        moved += 1
    return moved

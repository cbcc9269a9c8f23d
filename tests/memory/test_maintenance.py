"""Nightly memory maintenance: decay, promotion, dedup, history, note retention; whole files if killed."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bot.app import Application
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.domain.text import fingerprint_of
from bot.memory.maintenance import run_maintenance
from bot.storage.jsonl import read_jsonl_sync

NOW = datetime(2026, 11, 22, 3, 30, tzinfo=UTC)


def item(layer: MemoryLayer, content: str, *, days_old: int, **fields: object) -> MemoryItem:
    moment = NOW - timedelta(days=days_old)
    return MemoryItem(layer=layer, type=str(fields.pop("type", "fact")), content=content, created_at=moment,
                      updated_at=moment, fingerprint=fingerprint_of(content), source="telegram:1",
                      **fields)  # fmt: skip


def write_items(path: Path, items: list[MemoryItem]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i.to_json_dict()) + "\n" for i in items))


async def test_maintenance_changes_exactly_what_the_configuration_says(services: Application) -> None:
    items_dir = services.workspace.memory.items_dir
    stale = item(MemoryLayer.SEMANTIC, "The user likes chess", days_old=40, salience=0.8)
    fresh = item(MemoryLayer.SEMANTIC, "The user lives in Porto", days_old=3, salience=0.8)
    duplicate_a = item(MemoryLayer.SEMANTIC, "The user's cat is called Miso", days_old=5, confidence=0.6)
    duplicate_b = item(MemoryLayer.SEMANTIC, "the user's cat is called miso!", days_old=2, confidence=0.6)
    newer = item(MemoryLayer.SEMANTIC, "The user works at Acme", days_old=1)
    old_history = item(MemoryLayer.SEMANTIC, "The user works at Initech", days_old=200, superseded_by=newer.id)
    young_history = item(MemoryLayer.SEMANTIC, "The user works at Hooli", days_old=20, superseded_by=newer.id)
    write_items(
        items_dir / "semantic.jsonl", [stale, fresh, duplicate_a, duplicate_b, newer, old_history, young_history]
    )
    confident = item(MemoryLayer.EPISODIC, "The user uses Arch Linux", days_old=1, confidence=0.8)
    unsure = item(MemoryLayer.EPISODIC, "The user uses vim", days_old=1, confidence=0.6)
    write_items(items_dir / "episodic" / "2026-11-21.jsonl", [confident, unsure])
    for day in ["2026-09-30", "2026-10-01", "2026-11-21"]:
        (services.workspace.memory_dir / f"{day}.md").write_text(f"[10:00] User: on {day} | Assistant: ok\n")

    config = services.config_store.in_force().memory.model_copy(update={"note_retention_days": 30})
    report = await run_maintenance(services.memory, config, NOW)

    assert (report.decayed, report.promoted, report.merged, report.history_dropped, report.notes_archived) == (
        1, 1, 1, 1, 2
    )  # fmt: skip
    semantic = {record["content"]: record for record in read_jsonl_sync(items_dir / "semantic.jsonl")}
    assert semantic["The user likes chess"]["salience"] == 0.4  # halved: unused for 40 > 30 days
    assert semantic["The user lives in Porto"]["salience"] == 0.8
    assert "the user's cat is called miso!" not in semantic
    assert semantic["The user's cat is called Miso"]["confidence"] == 0.75
    assert "The user works at Initech" not in semantic and "The user works at Hooli" in semantic
    assert "The user uses Arch Linux" in semantic and "The user uses vim" not in semantic
    episodic = read_jsonl_sync(items_dir / "episodic" / "2026-11-21.jsonl")
    assert [record["content"] for record in episodic] == ["The user uses vim"]

    archive = services.workspace.memory_dir / "archive"
    assert (archive / "2026-09.md").read_text() == "## 2026-09-30\n[10:00] User: on 2026-09-30 | Assistant: ok\n\n"
    assert "## 2026-10-01" in (archive / "2026-10.md").read_text()
    assert sorted(p.name for p in services.workspace.memory_dir.glob("2026-*.md")) == ["2026-11-21.md"]

    again = await run_maintenance(services.memory, config, NOW)
    assert (again.promoted, again.merged, again.history_dropped, again.notes_archived) == (0, 0, 0, 0)


def test_a_maintenance_run_killed_half_way_leaves_every_file_whole(tmp_path: Path) -> None:
    chance = random.Random(7)
    workspace = tmp_path / "workspace"
    memory = workspace / "memory"
    start = date(2025, 1, 1)
    for offset in range(300):
        day = start + timedelta(days=offset)
        (memory / f"{day.isoformat()}.md").parent.mkdir(parents=True, exist_ok=True)
        (memory / f"{day.isoformat()}.md").write_text(f"[09:00] User: day {day} | Assistant: noted\n")
    items = [item(MemoryLayer.SEMANTIC, f"Fact number {n} " + "x" * (n % 50), days_old=n % 90) for n in range(3000)]
    write_items(memory / "items" / "semantic.jsonl", items + items[:300])  # duplicates to merge
    for _ in range(8):
        victim = subprocess.Popen([sys.executable, "-m", "tests.memory.maintenance_runner", str(workspace)])
        time.sleep(chance.uniform(0.3, 1.5))
        victim.kill()
        victim.wait()
        records = read_jsonl_sync(memory / "items" / "semantic.jsonl")
        assert {record["content"] for record in records} == {i.content for i in items}  # nothing lost
        archived = (
            "".join(p.read_text() for p in (memory / "archive").glob("*.md")) if (memory / "archive").exists() else ""
        )
        remaining = "".join(p.read_text() for p in memory.glob("20*.md"))
        for offset in range(300):
            assert f"day {start + timedelta(days=offset)} " in archived + remaining

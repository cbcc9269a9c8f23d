"""`MemoryState`: a summary of what the memory files hold, for `/status`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from bot.workspace import Workspace

LAYER_FILES = {"EPISODIC": "episodic/*.jsonl", "SEMANTIC": "semantic.jsonl", "PROCEDURAL": "procedural.jsonl"}


@dataclass(frozen=True)
class MemoryState:
    long_term_chars: int
    items_per_layer: dict[str, int]
    today_note_lines: int


def _count_lines(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as handle:
            total += sum(1 for line in handle if line.strip())
    return total


def _read_state(workspace: Workspace, today: date) -> MemoryState:
    long_term = workspace.long_term_memory_file
    long_term_chars = len(long_term.read_text(encoding="utf-8", errors="replace")) if long_term.is_file() else 0
    items = {layer: _count_lines(sorted(workspace.items_dir.glob(pattern))) for layer, pattern in LAYER_FILES.items()}
    note = workspace.daily_note_file(today)
    return MemoryState(long_term_chars, items, _count_lines([note]) if note.is_file() else 0)


async def read_memory_state(workspace: Workspace, today: date) -> MemoryState:
    return await asyncio.to_thread(_read_state, workspace, today)

"""`MemoryPaths`: where one memory scope keeps its files, and which scope a chat uses.

With `memory.scope = "global"` every chat shares `workspace/memory/`; with `"chat"` each chat has the
same layout under `workspace/memory/chats/{sessionId}/`, so nothing of one chat can reach another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Literal

from bot.domain.session import checked_session_id
from bot.workspace import Workspace

MemoryScope = Literal["global", "chat"]
CHAT_SCOPES_DIR = "chats"


@dataclass(frozen=True)
class MemoryPaths:
    """The files of one memory scope (CONTRACT's `memory/` layout, rooted at `root`)."""

    root: Path

    @property
    def long_term_file(self) -> Path:
        return self.root / "MEMORY.md"

    def daily_note_file(self, day: date) -> Path:
        return self.root / f"{day.isoformat()}.md"

    @property
    def items_dir(self) -> Path:
        return self.root / "items"

    @property
    def episodic_dir(self) -> Path:
        return self.items_dir / "episodic"

    def episodic_file(self, day: date) -> Path:
        return self.episodic_dir / f"{day.isoformat()}.jsonl"

    @property
    def semantic_file(self) -> Path:
        return self.items_dir / "semantic.jsonl"

    @property
    def procedural_file(self) -> Path:
        return self.items_dir / "procedural.jsonl"


def memory_paths_for(workspace: Workspace, scope: MemoryScope, session_id: str) -> MemoryPaths:
    """The memory a chat reads and writes under the configured scope."""
    if scope == "chat":
        return MemoryPaths(workspace.memory_dir / CHAT_SCOPES_DIR / checked_session_id(session_id))
    return MemoryPaths(workspace.memory_dir)

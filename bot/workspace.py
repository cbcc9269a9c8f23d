"""`Workspace`: where every file of the bot lives, and creating it from `workspace_template/`.

The workspace holds its owner's conversations and memory: it is private to the bot's user (the top
folder 0700, tightened at every start; what the bot creates inside is 0700/0600, see `bot.storage.files`).
"""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from pathlib import Path

from bot.storage.files import PRIVATE_DIR_MODE, make_private_dirs, write_atomic_sync

log = logging.getLogger(__name__)


def _of_day(made: dict[date, Path], day: date, folder: Path, suffix: str) -> Path:
    """The file of `day` in `folder`, made once (a message asks for the last week's daily notes)."""
    path = made.get(day)
    if path is None:
        path = made[day] = folder / f"{day.isoformat()}{suffix}"
    return path


@dataclass(frozen=True)
class MemoryPaths:
    """The files of one memory scope (the `memory/` layout of docs/memory.md, rooted at `root`).

    Each path is made once and kept (`cached_property`): they are asked for many times a message."""

    root: Path

    @cached_property
    def long_term_file(self) -> Path:
        return self.root / "MEMORY.md"

    def daily_note_file(self, day: date) -> Path:
        return _of_day(self._daily_note_files, day, self.root, ".md")

    @cached_property
    def _daily_note_files(self) -> dict[date, Path]:
        return {}

    @cached_property
    def items_dir(self) -> Path:
        return self.root / "items"

    @cached_property
    def episodic_dir(self) -> Path:
        return self.items_dir / "episodic"

    def episodic_file(self, day: date) -> Path:
        return _of_day(self._episodic_files, day, self.episodic_dir, ".jsonl")

    @cached_property
    def _episodic_files(self) -> dict[date, Path]:
        return {}

    @cached_property
    def semantic_file(self) -> Path:
        return self.items_dir / "semantic.jsonl"

    @cached_property
    def procedural_file(self) -> Path:
        return self.items_dir / "procedural.jsonl"

    @cached_property
    def index_dir(self) -> Path:
        """Derived search data (item vectors): rebuilt from the item files when missing, never the truth."""
        return self.root / "index"


@dataclass(frozen=True)
class Workspace:
    """The paths of the workspace layout (docs/memory.md), rooted at `BOT_WORKSPACE` (each made once, as in
    `MemoryPaths`)."""

    root: Path

    @cached_property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @cached_property
    def memory(self) -> MemoryPaths:
        """The global memory's files (a chat's own, with `memory.scope: chat`, are under `memory/chats/`)."""
        return MemoryPaths(self.memory_dir)

    @cached_property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @cached_property
    def preferences_dir(self) -> Path:
        return self.root / "preferences"

    @cached_property
    def runtime_config_file(self) -> Path:
        return self.preferences_dir / "runtime-config.json"

    @cached_property
    def models_file(self) -> Path:
        return self.preferences_dir / "models.json"

    @cached_property
    def system_prompt_file(self) -> Path:
        return self.preferences_dir / "system-prompt.md"

    @cached_property
    def skills_dir(self) -> Path:
        return self.root / "skills"

    @cached_property
    def rag_dir(self) -> Path:
        return self.root / "rag"

    @cached_property
    def rag_journal_file(self) -> Path:
        """The knowledge graph's journal: its indexing queue and the record of what it indexed."""
        return self.rag_dir / "documents.jsonl"

    @cached_property
    def uploads_file(self) -> Path:
        """The documents sent in chats (`DocumentReader`), and how far reading each got."""
        return self.rag_dir / "uploads.jsonl"

    @cached_property
    def chat_moves_file(self) -> Path:
        """The chats whose id changed (`bot.chat_move_records.MoveFile`), each move begun and done."""
        return self.root / "state" / "chat_moves.jsonl"

    @cached_property
    def tool_results_dir(self) -> Path:
        return self.root / "tool_results"

    @cached_property
    def reminders_file(self) -> Path:
        return self.root / "reminders.json"

    @cached_property
    def chat_log_file(self) -> Path:
        """Where `python -m bot chat` logs, so that the terminal holds the conversation alone."""
        return self.root / "logs" / "chat.log"

    @cached_property
    def chat_history_file(self) -> Path:
        """The lines typed in `python -m bot chat`, for the arrow keys and Ctrl-R of the next chat."""
        return self.root / "state" / "chat-history"

    def required_dirs(self) -> list[Path]:
        return [
            self.memory_dir,
            self.memory.episodic_dir,
            self.sessions_dir / "archive",
            self.preferences_dir,
            self.rag_dir,
            self.tool_results_dir,
        ]

    def complete_from(self, template: Path) -> list[Path]:
        """Create whatever is missing, copying files from `template`; never overwrites. Returns what it made.

        The top folder is made private (0700) too, if an older version or a person left it open.
        """
        created: list[Path] = []
        for folder in self.required_dirs():
            if not folder.is_dir():
                make_private_dirs(folder)
                created.append(folder)
        for source in sorted(template.rglob("*")):
            if not source.is_file():
                continue
            target = self.root / source.relative_to(template)
            if target.exists():
                continue
            write_atomic_sync(target, source.read_bytes())
            created.append(target)
        if created:
            log.info("[Workspace] Completed %s: %d files and folders created", self.root, len(created))
        self._make_private()
        return created

    def _make_private(self) -> None:
        mode = stat.S_IMODE(self.root.stat().st_mode)
        if mode & ~PRIVATE_DIR_MODE == 0:
            return
        try:
            self.root.chmod(PRIVATE_DIR_MODE)
        except OSError as error:
            log.warning("[Workspace] %s is open to other users (%o) and could not be made private: %s",
                        self.root, mode, error)  # fmt: skip
            return
        log.info("[Workspace] Made %s private to its owner (%o -> 700)", self.root, mode)

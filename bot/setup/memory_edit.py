"""`python -m bot memory edit`: change MEMORY.md by hand, saved whole or not at all.

In a terminal it opens `$VISUAL` or `$EDITOR` (else the first of `EDITORS` found) on a copy, and writes the
copy back whole when the editor exits successfully and something changed: a running bot reads either
the old text or the new one, never half of it. It edits MEMORY.md where the bot keeps it: the workspace's
file, or its row in PostgreSQL with `BOT_DATABASE_URL`. With input from a pipe (`docker compose exec -T bot bot
memory edit < MEMORY.md`, where the image has no editor) the input becomes the new MEMORY.md.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from bot.memory.documents import LONG_TERM_NAME, MemoryDocuments

# Tried in order when neither VISUAL nor EDITOR is set.
EDITORS = ("sensible-editor", "nano", "vim", "vi")


def _editor() -> list[str] | None:
    for variable in ("VISUAL", "EDITOR"):
        chosen = os.environ.get(variable, "").strip()
        if chosen:
            return shlex.split(chosen)
    for name in EDITORS:
        found = shutil.which(name)
        if found:
            return [found]
    return None


async def edit_memory(documents: MemoryDocuments, target: str) -> int:
    """Edit the owner's MEMORY.md in `documents`; `target` names where it is kept, for the messages."""
    before = await documents.read(LONG_TERM_NAME) or ""
    if not sys.stdin.isatty():
        after = sys.stdin.read()
        if not after.strip():
            # A pipe that brought nothing (a shell without input) must not empty the memory.
            print(f"No text came in: {target} is unchanged.", file=sys.stderr)
            return 1
        return await _save(documents, target, before, after)
    editor = _editor()
    if editor is None:
        print(
            "No editor found: set EDITOR (e.g. EDITOR=nano), or pipe the new text in: "
            "python -m bot memory edit < MEMORY.md",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="memory-edit-") as folder:
        copy = Path(folder) / "MEMORY.md"
        copy.write_text(before, encoding="utf-8")
        finished = await asyncio.create_subprocess_exec(*editor, str(copy))
        status = await finished.wait()
        if status != 0:
            print(f"The editor exited with status {status}: {target} is unchanged.", file=sys.stderr)
            return 1
        return await _save(documents, target, before, copy.read_text(encoding="utf-8"))


async def _save(documents: MemoryDocuments, target: str, before: str, after: str) -> int:
    if after == before:
        print(f"{target} is unchanged.")
        return 0
    await documents.write(LONG_TERM_NAME, after.encode("utf-8"))
    print(f"Saved {target} ({len(after)} characters); the bot reads it on the next message.")
    return 0

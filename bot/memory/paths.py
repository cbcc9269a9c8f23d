"""`MemoryPaths`: where one memory scope keeps its files, and which scope a chat uses.

With `memory.scope = "global"` every chat shares `workspace/memory/`; with `"chat"` each chat has the
same layout under `workspace/memory/chats/{sessionId}/`, so nothing of one chat can reach another's.
"""

from __future__ import annotations

from typing import Literal

from bot.domain.session import checked_session_id
from bot.workspace import MemoryPaths, Workspace

MemoryScope = Literal["global", "chat"]
CHAT_SCOPES_DIR = "chats"


def memory_paths_for(workspace: Workspace, scope: MemoryScope, session_id: str) -> MemoryPaths:
    """The memory a chat reads and writes under the configured scope."""
    if scope == "chat":
        return MemoryPaths(workspace.memory_dir / CHAT_SCOPES_DIR / checked_session_id(session_id))
    return MemoryPaths(workspace.memory_dir)

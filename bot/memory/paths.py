"""`MemoryPaths`: where one memory scope keeps its files, and which scope a chat uses.

With `memory.scope = "global"` the owner's chats share `workspace/memory/` (which folders the other
chats use is `bot.memory.audience`'s rule); with `"chat"` each chat has the same layout under
`workspace/memory/chats/{sessionId}/`, so nothing of one chat can reach another's.
With `"user"` each person has their own under `workspace/memory/users/{sessionId}/`, where the
session id is their private chat's (on Telegram a private chat's id is the person's id), while a
group keeps its own under `memory/chats/` (group facts stay with the group; see `person_memory_key`).
The topics of a forum group share the group's memory: their sessions are apart, their memory is not.
"""

from __future__ import annotations

from typing import Literal

from bot.domain.session import checked_session_id, whole_chat_session_id
from bot.workspace import MemoryPaths, Workspace

MemoryScope = Literal["global", "chat", "user"]
CHAT_SCOPES_DIR = "chats"
USER_SCOPES_DIR = "users"


def is_group_session(session_id: str) -> bool:
    """A group chat's session: Telegram gives groups negative chat ids, people positive ones."""
    return session_id.split(":", 1)[-1].startswith("-")


def person_memory_key(channel_type: str, user_id: str) -> str:
    """The memory key of one person under `user` scope: the id of their private chat with the bot."""
    return checked_session_id(f"{channel_type}:{user_id}")


def memory_paths_for(workspace: Workspace, scope: MemoryScope, session_id: str) -> MemoryPaths:
    """The memory a chat (or, under `user` scope, a person: `person_memory_key`) reads and writes."""
    session_id = whole_chat_session_id(session_id)
    if scope == "chat" or (scope == "user" and is_group_session(session_id)):
        return MemoryPaths(workspace.memory_dir / CHAT_SCOPES_DIR / checked_session_id(session_id))
    if scope == "user":
        return MemoryPaths(workspace.memory_dir / USER_SCOPES_DIR / checked_session_id(session_id))
    return MemoryPaths(workspace.memory_dir)

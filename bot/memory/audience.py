"""Audiences: whose memory a chat reads and writes, and which parts of MEMORY.md the owner shares.

Every piece of memory has an audience. What the owner says in their own chats (a private chat with
the bot, the terminal) and MEMORY.md are the owner's; what a group says belongs to the group; what
another person says in their private chat is theirs. Under `memory.scope: global` the owner's memory
is the workspace's `memory/` (so everything a workspace already holds there stays the owner's: no
file is rewritten, and an item without a mark is the owner's); a group's is `memory/chats/{group}/`
and another person's `memory/users/{chat}/`, the folders `memory.scope: user` uses. The `chat` and
`user` scopes already keep every chat or person apart. `memory.ownerMemoryEverywhere` gives every chat
the owner's memory, as one memory for all.

The owner shares a part of their memory with everyone who talks to the bot by putting it in a
`## Shared` section of MEMORY.md (to the next heading of the same or a higher level), or by marking
an item shared (`/memory share ID`). Those parts reach every chat's prompt; the rest of MEMORY.md
never leaves the owner's chats. `long_term_sections` is the one place MEMORY.md is split into its
sections, each with whether it is shared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.access.policy import sees_owner_memory
from bot.memory.paths import MemoryScope, person_memory_key
from bot.settings import MemoryConfig

SHARED_HEADING = "Shared"
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


@dataclass(frozen=True)
class LongTermSection:
    """A part of MEMORY.md: the text from one heading to the next (the first part may have none)."""

    heading: str | None
    level: int
    text: str
    shared: bool


def is_shared_heading(title: str) -> bool:
    """`## Shared`, also with words after it (`## Shared with the family`)."""
    words = title.split(maxsplit=1)
    return bool(words) and words[0].rstrip(":").casefold() == SHARED_HEADING.casefold()


def long_term_sections(text: str) -> list[LongTermSection]:
    """MEMORY.md cut at its headings (not inside code blocks), in order; joined, they are the text again.

    A section under a level-2 `## Shared` heading is shared, and so are its subsections, up to the next
    heading of level 1 or 2; everything else is the owner's alone.
    """
    sections: list[LongTermSection] = []
    lines: list[str] = []
    heading: str | None = None
    level = 0
    shared = False
    in_fence = False

    def close() -> None:
        if lines:
            sections.append(LongTermSection(heading, level, "".join(lines), shared))

    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        found = None if in_fence else _HEADING.match(line.rstrip("\n"))
        if found is not None:
            close()
            lines = []
            level, heading = len(found[1]), found[2]
            if level <= 2:
                shared = level == 2 and is_shared_heading(heading)
        lines.append(line)
    close()
    return sections


def shared_long_term(text: str) -> str:
    """What everyone may read of the owner's MEMORY.md: its `## Shared` sections, headings included."""
    return "".join(section.text for section in long_term_sections(text) if section.shared).strip("\n")


def memory_scope_for(config: MemoryConfig, session_id: str, allowed_users: list[int]) -> MemoryScope:
    """The scope whose folders a chat's memory lives in: under `global`, the owner's (`memory/`) only
    for the owner's own chats; any other chat keeps its own, as under `user`."""
    if config.scope == "global" and not sees_owner_memory(session_id, allowed_users, config.owner_memory_everywhere):
        return "user"
    return config.scope


def owner_memory_key(config: MemoryConfig, allowed_users: list[int]) -> str | None:
    """Under `chat` and `user`, the key of the owner's memory (what their private chat reads), where the
    shared parts come from; None under `global` (the owner's memory is `memory/` itself) and when no
    owner is set."""
    if config.scope == "global" or not allowed_users:
        return None
    return person_memory_key("telegram", str(allowed_users[0]))

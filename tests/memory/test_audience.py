"""Audiences: which part of MEMORY.md the owner shares, and whose memory folders a chat uses."""

from __future__ import annotations

from pathlib import Path

from bot.memory.audience import long_term_sections, memory_scope_for, owner_memory_key, shared_long_term
from bot.memory.paths import memory_paths_for
from bot.rag.documents import rag_workspace_for
from bot.settings import MemoryConfig, RuntimeConfig
from bot.workspace import Workspace

MEMORY_MD = """Loose line before any heading.

# Me

- born in 1980

## Shared with the family

- wifi: Tangerine-42

### Birthdays

- Ann: 3 May

```markdown
## Health
- not a heading: inside a code block
```

## Health

- penicillin allergy

# Work

## shared:

- office address: 1 Main St
"""


def test_sections_join_back_into_the_text_and_the_shared_ones_are_marked() -> None:
    sections = long_term_sections(MEMORY_MD)
    assert "".join(section.text for section in sections) == MEMORY_MD
    assert [(section.heading, section.shared) for section in sections] == [
        (None, False),
        ("Me", False),
        ("Shared with the family", True),
        ("Birthdays", True),  # a subsection of a shared section is shared
        ("Health", False),  # the code block's "## Health" is not a heading; this one ends the shared part
        ("Work", False),
        ("shared:", True),
    ]


def test_only_the_shared_sections_are_given_to_everyone() -> None:
    shared = shared_long_term(MEMORY_MD)
    assert shared.startswith("## Shared with the family\n\n- wifi: Tangerine-42")
    assert "Ann: 3 May" in shared and "not a heading: inside a code block" in shared
    assert "office address" in shared
    assert "penicillin" not in shared and "born in 1980" not in shared and "Loose line" not in shared
    assert shared_long_term("# Notes\n\nnothing shared here\n") == ""
    assert shared_long_term("") == ""


def test_under_global_scope_only_the_owners_chats_use_the_owners_memory() -> None:
    config, owner, ann, group = MemoryConfig(), "telegram:4242", "telegram:1001", "telegram:-100123"
    allowed = [4242, 1001]
    assert memory_scope_for(config, owner, allowed) == "global"
    assert memory_scope_for(config, "console:local", allowed) == "global"  # the terminal is the owner's
    assert memory_scope_for(config, ann, allowed) == "user"
    assert memory_scope_for(config, group, allowed) == "user"
    assert memory_scope_for(config, owner, []) == "user"  # no owner set: no Telegram chat is the owner's
    everywhere = MemoryConfig(owner_memory_everywhere=True)
    assert memory_scope_for(everywhere, group, allowed) == "global"
    for scope in ("chat", "user"):
        apart = MemoryConfig(scope=scope)
        assert memory_scope_for(apart, group, allowed) == scope and memory_scope_for(apart, owner, allowed) == scope
    assert owner_memory_key(MemoryConfig(scope="user"), allowed) == owner
    assert owner_memory_key(MemoryConfig(scope="chat"), []) is None
    assert owner_memory_key(config, allowed) is None  # under `global` the owner's memory is `memory/` itself


def test_the_topics_of_a_forum_group_use_the_groups_memory_and_graph(tmp_path: Path) -> None:
    workspace, topic = Workspace(tmp_path), "telegram:-1001234567:topic:42"
    for scope in ("global", "chat", "user"):
        config = RuntimeConfig.model_validate({"memory": {"scope": scope}, "access": {"allowedUsers": [4242]}})
        memory = memory_scope_for(config.memory, topic, [4242])
        assert memory_paths_for(workspace, memory, topic) == memory_paths_for(workspace, memory, "telegram:-1001234567")
        assert (
            memory_paths_for(workspace, memory, topic).root == workspace.memory_dir / "chats" / "telegram:-1001234567"
        )
        assert rag_workspace_for(topic, config) == rag_workspace_for("telegram:-1001234567", config)

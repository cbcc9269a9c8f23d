"""`MemoryScopes`: a scope let go (its files about to move) is closed, and built again where its files are."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from bot.domain.memory import MemoryLayer
from bot.memory.scopes import MemoryScopes
from bot.workspace import MemoryPaths, Workspace
from tests.memory.helpers import item, write_items


async def test_a_scope_let_go_is_closed_and_read_again_from_where_its_files_went(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    scopes = MemoryScopes(workspace, UTC, None)
    old = MemoryPaths(workspace.memory_dir / "chats" / "telegram:-4001")
    new = MemoryPaths(workspace.memory_dir / "chats" / "telegram:-1004001")
    write_items(old.semantic_file, [item(MemoryLayer.SEMANTIC, "The picnic is on Saturday", datetime.now(UTC))])
    try:
        first = scopes.at(old)
        async with scopes.fresh(first):
            assert len(first.store) == 1
        await scopes.let_go(old)
        old.root.rename(new.root)
        moved = scopes.at(new)
        async with scopes.fresh(moved):
            assert [found.content for found in moved.store.items()] == ["The picnic is on Saturday"]
        assert scopes.in_use() == [moved]
    finally:
        await scopes.close()
    assert not old.root.exists()  # nothing of the closed scope written back under the old id

"""The workspace file tools, pruning and orphan closing, called directly."""

from __future__ import annotations

import asyncio
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from bot.domain.message import Message, ToolCall
from bot.settings import RuntimeConfig, ToolLoopConfig
from bot.tools.orphans import INTERRUPTED_RESULT, close_orphaned_tool_calls
from bot.tools.output_pruning import HARD_CLEAR_PLACEHOLDER, prune_tool_results
from bot.tools.registry import ToolContext, ToolRegistry
from bot.tools.workspace_files import register_workspace_file_tools

CONTEXT = ToolContext("test:1", "test", "1", RuntimeConfig())


@pytest.fixture
def registry(tmp_path: Path) -> ToolRegistry:
    (tmp_path / "sessions").mkdir()
    (tmp_path / "memory").mkdir()
    tools = ToolRegistry()
    register_workspace_file_tools(tools, tmp_path)
    return tools


async def run(registry: ToolRegistry, name: str, **arguments: object) -> str:
    outcome = await registry.execute(ToolCall(id="c", name=name, arguments=json.dumps(arguments)), CONTEXT)
    return outcome.content


async def test_read_with_offset_and_limit(registry: ToolRegistry, tmp_path: Path) -> None:
    (tmp_path / "memory" / "list.md").write_text("\n".join(f"item {n}" for n in range(10)))
    result = await run(registry, "read_file", path="memory/list.md", offset=2, limit=3)
    assert result == "[memory/list.md: lines 3-5 of 10; 5 more lines, read with offset=5]\nitem 2\nitem 3\nitem 4"


async def test_write_append_and_list(registry: ToolRegistry, tmp_path: Path) -> None:
    assert await run(registry, "write_file", path="notes/a.md", content="one\n") == "Wrote 4 characters to notes/a.md."
    assert (
        await run(registry, "append_file", path="notes/a.md", content="two\n") == "Appended 4 characters to notes/a.md."
    )
    assert (tmp_path / "notes" / "a.md").read_text() == "one\ntwo\n"
    listing = await run(registry, "list_dir")
    assert "notes/" in listing and "memory/" in listing and "sessions" not in listing
    assert await run(registry, "list_dir", path="notes") == "a.md (8 bytes)"


async def test_refusals_are_plain_errors(registry: ToolRegistry, tmp_path: Path) -> None:
    assert "does not exist" in await run(registry, "read_file", path="nope.md")
    assert "is a folder" in await run(registry, "read_file", path="memory")
    assert "private to the bot" in await run(registry, "list_dir", path="sessions")
    assert "private to the bot" in await run(registry, "write_file", path="./sessions/x.json", content="{}")
    assert "leads outside" in await run(registry, "list_dir", path="memory/../..")
    assert "is absolute" in await run(registry, "append_file", path="/tmp/x", content="x")
    huge = "x" * (RuntimeConfig().tool_loop.max_write_chars + 1)
    assert "at most" in await run(registry, "write_file", path="big.txt", content=huge)
    assert not (tmp_path / "big.txt").exists()


async def test_other_chats_data_and_the_bots_bookkeeping_are_out_of_reach(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    """Even when a remembered "fact" tells the model to, it cannot read another chat's files."""
    secrets = {
        "memory/chats/telegram:2/MEMORY.md": "the other chat's secret",
        "tool_results/telegram:2/call_x": "the other chat's tool output",
        "rag/kv_store_full_docs.json": "every conversation",
        "access/pairing.json": "who may talk",
        "state/turns.jsonl": "updates",
    }
    for relative, text in secrets.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    (tmp_path / "tool_results" / "test:1").mkdir()
    (tmp_path / "tool_results" / "test:1" / "call_mine").write_text("my own output")
    (tmp_path / "memory" / "escape").symlink_to(tmp_path / "memory" / "chats")
    for relative in [*secrets, "memory/escape/telegram:2/MEMORY.md"]:
        result = await run(registry, "read_file", path=relative)
        assert result.startswith("Error:") and "secret" not in result, relative
    assert "my own output" in await run(registry, "read_file", path="tool_results/test:1/call_mine")
    assert await run(registry, "list_dir", path="tool_results") == "test:1/"
    assert "chats" not in await run(registry, "list_dir", path="memory")


def tool_turn(call_id: str, output: str) -> list[Message]:
    call = ToolCall(id=call_id, name="read_file")
    return [Message.assistant("", tool_calls=[call]), Message.tool_result(call, output)]


def test_pruning_never_touches_user_or_assistant_text_and_skips_images() -> None:
    config = ToolLoopConfig(tool_soft_trim_chars=100, tool_soft_trim_head=10, tool_soft_trim_tail=10,
                            tool_hard_clear_after=2, keep_last_tool_results=0)  # fmt: skip
    long_text = "u" * 500
    messages = [Message.user(long_text), *tool_turn("a", "data:image/png;base64," + "A" * 500)]
    messages += [*tool_turn("b", "b" * 500), Message.assistant(long_text), *tool_turn("c", "c" * 500)]
    pruned = prune_tool_results(messages, config)
    assert pruned[0].content == long_text and pruned[5].content == long_text
    assert pruned[2].content.startswith("data:image/png")  # images are never pruned
    assert pruned[4].content.startswith("b" * 10 + "\n\n--- trimmed (kept 10 head + 10 tail of 500 chars) ---")
    assert pruned[7].content.endswith("c" * 10)
    assert messages[4].content == "b" * 500  # the input is not changed
    config_clear = config.model_copy(update={"tool_hard_clear_after": 1})
    assert prune_tool_results(messages, config_clear)[4].content == HARD_CLEAR_PLACEHOLDER


def test_orphans_are_closed_right_after_their_call() -> None:
    calls = [ToolCall(id="x", name="list_dir"), ToolCall(id="y", name="list_dir")]
    messages = [Message.user("go"), Message.assistant("", tool_calls=calls), Message.tool_result(calls[0], "ok"),
                Message.user("next")]  # fmt: skip
    patched, added = close_orphaned_tool_calls(messages)
    assert [m.role.value for m in patched] == ["user", "assistant", "tool", "tool", "user"]
    assert patched[3].tool_call_id == "y" and patched[3].content == INTERRUPTED_RESULT
    assert added == [patched[3]]
    assert close_orphaned_tool_calls(patched)[1] == []


async def test_a_binary_file_is_named_as_such_and_other_encodings_read_as_text(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)) * 40)
    assert (
        await run(registry, "read_file", path="photo.jpg")
        == "Error: 'photo.jpg' is a binary file of 10251 bytes, not text"
    )
    (tmp_path / "notepad.txt").write_bytes("shopping: milk\r\nbread\r\n".encode("utf-16"))
    assert (
        await run(registry, "read_file", path="notepad.txt") == "[notepad.txt: lines 1-2 of 2]\nshopping: milk\nbread"
    )
    (tmp_path / "bom.md").write_bytes("\ufeff# Title\ntext".encode())
    assert await run(registry, "read_file", path="bom.md") == "[bom.md: lines 1-2 of 2]\n# Title\ntext"


async def test_a_huge_file_is_read_a_page_at_a_time_without_holding_it(registry: ToolRegistry, tmp_path: Path) -> None:
    with (tmp_path / "huge.log").open("w") as huge:
        for _ in range(6):
            huge.write(("x" * 99 + "\n") * 50_000)  # 30 MB in all
    limit = RuntimeConfig().tool_loop.max_read_chars
    tracemalloc.start()
    try:
        last_page = await run(registry, "read_file", path="huge.log", offset=299_990, limit=5000)
        first_page = await run(registry, "read_file", path="huge.log", limit=5000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20  # a page's worth, not the file's
    assert last_page == "[huge.log: lines 299991-300000 of 300000]\n" + "\n".join(["x" * 99] * 10)
    shown = limit // 100 + 1  # the lines that fit, and the one cut
    assert first_page.startswith(
        f"[huge.log: lines 1-{shown} of 300000; {300_000 - shown} more lines, read with offset={shown}; cut at {limit}"
    )
    assert len(first_page) < limit + 200


async def test_a_write_the_disk_refuses_and_a_crowded_folder_are_said_plainly(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    (tmp_path / "notes").write_text("a file, not a folder")
    for tool in ("write_file", "append_file"):
        result = await run(registry, tool, path="notes/today.md", content="x")
        assert result == "Error: 'notes/today.md' cannot be written: notes is a file, not a folder"
    (tmp_path / "photos").mkdir()
    for number in range(503):
        (tmp_path / "photos" / f"{number:04}.jpg").touch()
    listing = (await run(registry, "list_dir", path="photos")).splitlines()
    assert listing[0] == "0000.jpg (0 bytes)" and listing[499] == "0499.jpg (0 bytes)"
    assert listing[500:] == ["… and 3 more entries, not listed"]


async def test_a_named_pipe_is_refused_not_waited_on(registry: ToolRegistry, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # nothing ever writes to it: opening it to read would wait for good
    async with asyncio.timeout(5):
        assert await run(registry, "read_file", path="pipe") == (
            "Error: 'pipe' is not a regular file (a pipe, a socket or a device)"
        )
        assert await run(registry, "append_file", path="pipe", content="x") == (
            "Error: 'pipe' is not a regular file (a pipe, a socket or a device)"
        )

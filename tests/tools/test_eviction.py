"""Eviction of a large tool output on its own: the file it is saved to, and the preview that stays."""

from __future__ import annotations

from pathlib import Path

from bot.tools.eviction import MAX_FILE_NAME_CHARS, PREVIEW_EDGE_CHARS, evict_if_large, evicted_file_name


async def test_a_small_output_stays_as_it_is_and_nothing_is_written(tmp_path: Path) -> None:
    assert await evict_if_large("short", "call_1", "telegram:1", tmp_path, limit_chars=5, preview_lines=2) == "short"
    assert not (tmp_path / "tool_results").exists()


async def test_a_large_output_is_saved_whole_and_the_preview_shows_its_head_and_tail(tmp_path: Path) -> None:
    content = "\n".join(f"line {n}" for n in range(1, 101))
    preview = await evict_if_large(content, "call_1", "telegram:1", tmp_path, limit_chars=50, preview_lines=3)
    assert (tmp_path / "tool_results" / "telegram:1" / "call_1").read_text() == content
    lines = preview.splitlines()
    assert lines[0].startswith(f"[Output too large for the conversation: {len(content)} characters, 100 lines.")
    assert "read_file(path='tool_results/telegram:1/call_1'" in lines[0]
    assert lines[1:] == ["line 1", "line 2", "line 3", "[... 94 lines not shown ...]", "line 98", "line 99", "line 100"]


async def test_a_few_very_long_lines_are_previewed_by_characters(tmp_path: Path) -> None:
    content = "a" * 3000 + "\n" + "b" * 3000
    preview = await evict_if_large(content, "call_2", "telegram:1", tmp_path, limit_chars=100, preview_lines=3)
    body = preview.split("\n", 1)[1]
    head, hidden, tail = body.split("\n")
    assert head == "a" * PREVIEW_EDGE_CHARS and tail == "b" * PREVIEW_EDGE_CHARS
    assert hidden == f"[... {len(content) - 2 * PREVIEW_EDGE_CHARS} characters not shown ...]"


def test_a_call_id_from_the_model_names_only_a_plain_file_of_a_sane_length() -> None:
    assert evicted_file_name("call_AbC-1.2") == "call_AbC-1.2"
    assert evicted_file_name("../../etc/passwd") == "_.._etc_passwd"
    assert evicted_file_name("...") == "call" and evicted_file_name("") == "call"
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(evicted_file_name(long_a)) == MAX_FILE_NAME_CHARS
    assert evicted_file_name(long_a) != evicted_file_name(long_b)  # cut, and kept apart by the hash

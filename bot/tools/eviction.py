"""Eviction of large tool outputs: the whole output goes to `tool_results/{session}/{tool_call_id}`
(one folder per chat, so no chat can read another's), and the conversation keeps a preview (head and
tail lines) with a reference the model can read back."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from bot.storage.files import write_atomic

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Real call ids are a few dozen characters; a longer one is cut and made unique with its hash.
MAX_FILE_NAME_CHARS = 100


def evicted_file_name(tool_call_id: str) -> str:
    # Call ids come from the model; keep them from naming anything but a plain file of a sane length.
    name = _UNSAFE.sub("_", tool_call_id).lstrip(".") or "call"
    if len(name) > MAX_FILE_NAME_CHARS:
        digest = hashlib.sha256(tool_call_id.encode("utf-8", "replace")).hexdigest()[:16]
        name = f"{name[: MAX_FILE_NAME_CHARS - len(digest) - 1]}-{digest}"
    return name


# When the output has few, very long lines, the preview shows this many characters at each end instead.
PREVIEW_EDGE_CHARS = 1000


def eviction_preview(content: str, relative_path: str, preview_lines: int) -> str:
    lines = content.splitlines()
    if len(lines) > 2 * preview_lines:
        hidden = f"[... {len(lines) - 2 * preview_lines} lines not shown ...]"
        shown = "\n".join([*lines[:preview_lines], hidden, *lines[-preview_lines:]])
    else:
        hidden = f"[... {len(content) - 2 * PREVIEW_EDGE_CHARS} characters not shown ...]"
        shown = "\n".join([content[:PREVIEW_EDGE_CHARS], hidden, content[-PREVIEW_EDGE_CHARS:]])
    return (
        f"[Output too large for the conversation: {len(content)} characters, {len(lines)} lines. "
        f"Saved to {relative_path}; read it with read_file(path={relative_path!r}, offset=..., limit=...).]\n"
        f"{shown}"
    )


async def evict_if_large(
    content: str, tool_call_id: str, session_id: str, workspace_root: Path, limit_chars: int, preview_lines: int
) -> str:
    """`content` itself when small; else saved to `tool_results/{session}/` and replaced by its preview."""
    if len(content) <= limit_chars:
        return content
    relative_path = f"tool_results/{session_id}/{evicted_file_name(tool_call_id)}"
    await write_atomic(workspace_root / relative_path, content.encode("utf-8", "backslashreplace"))
    return eviction_preview(content, relative_path, preview_lines)

"""The filesystem tools: `read_file`, `write_file`, `append_file`, `list_dir`, confined to the workspace.

Every path is relative to the workspace. Absolute paths, `..`, and symlinks that lead outside are
refused whatever the model asks, and so is whatever belongs to other chats or to the bot itself:
conversations (`sessions/`; a chat's own history is searched with `search_history`), per-chat
memory (`memory/chats/`; a chat's own is reached through the memory tools), the knowledge graph
(`rag/`), access and channel state, every chat's reminders (`reminders.json`; a chat's own are
reached through the reminder tools), and other chats' evicted tool outputs under `tool_results/`.
`preferences/` (runtime-config, persona, models) is the operator's: the tools read it, never change
it, so no instruction the model is given can let a stranger in or reroute the bot. `memory/` and
`preferences/` are the owner's: a turn that may not see the owner's private memory (a group's,
another person's; see `bot.memory.audience`) is told their files do not exist, and cannot write
there. The configuration names who may talk to the bot and may hold an MCP server's credentials, so
it is no more another person's to read than the owner's notes.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import os
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from bot.access.policy import sees_owner_memory
from bot.storage.files import append_text, write_atomic
from bot.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

# What the tools never touch: other chats' data, and the bot's own bookkeeping.
PRIVATE_PATHS = ("sessions/", "memory/chats/", "memory/users/", "rag/", "access/", "state/", "media/", "reminders.json")
# The owner's memory and configuration: only a turn that may see the owner's private memory reaches
# them (the folders of other chats and people in memory/ are private to the bot whoever asks).
OWNERS_PATHS = ("memory/", "preferences/")
# What the tools may read but never change.
READ_ONLY_PATHS = ("preferences/",)
TOOL_RESULTS = "tool_results"
# Linux's limits (PATH_MAX, NAME_MAX, in bytes); a longer path is refused before the filesystem sees it.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
# A NUL byte in this much of a file's start marks it as binary (no text has one).
BINARY_SNIFF_BYTES = 8192
# A folder's listing shows this many entries, and says how many more there are.
MAX_LISTED_ENTRIES = 500
# How much of a refused path an error repeats.
SHOWN_PATH_CHARS = 120


def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.rstrip("/").split("/"))


_PRIVATE = [(path, _parts(path)) for path in PRIVATE_PATHS]
_READ_ONLY = [(path, _parts(path)) for path in READ_ONLY_PATHS]
_OWNERS = [_parts(path) for path in OWNERS_PATHS]


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= SHOWN_PATH_CHARS else raw[:SHOWN_PATH_CHARS] + "…")


class WorkspaceJail:
    """Turns a path the model gave into a real path inside the workspace, or refuses it."""

    def __init__(self, root: Path) -> None:
        self._root = root.resolve()

    def resolve(self, raw: str, session_id: str, *, for_writing: bool = False, owner: bool = True) -> Path:
        """The real path for `raw` as the chat `session_id` may use it; `ToolError` when it may not.

        `owner`: the turn may see the owner's private memory; when it may not, the owner's memory files
        (`memory/`) are refused as if they did not exist."""
        text = raw.strip()
        if not text or text == ".":
            return self._root
        if "\0" in text:
            raise ToolError("the path contains a NUL character")
        normalized = text.replace("\\", "/")
        self._check_length(normalized)
        relative = PurePosixPath(normalized)
        if relative.is_absolute() or text.startswith("~"):
            raise ToolError(f"{_shown(raw)} is absolute; paths are relative to the workspace")
        if ".." in relative.parts:
            raise ToolError(f"{_shown(raw)} leads outside the workspace")
        self._check_allowed(raw, relative.parts, session_id, for_writing, owner)
        try:
            candidate = (self._root / relative).resolve()  # follows symlinks, so one pointing out is caught here
        except RuntimeError as error:  # how `Path.resolve` reports a symlink loop
            raise ToolError(f"{_shown(raw)} is a loop of symbolic links") from error
        except OSError as error:
            raise ToolError(f"{_shown(raw)} cannot be opened: {error.strerror or type(error).__name__}") from error
        if not candidate.is_relative_to(self._root):
            raise ToolError(f"{_shown(raw)} leads outside the workspace")
        self._check_allowed(raw, candidate.relative_to(self._root).parts, session_id, for_writing, owner)
        return candidate

    @staticmethod
    def _check_length(text: str) -> None:
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate, which JSON allows
            raise ToolError("the path is not valid Unicode text") from error
        if len(encoded) > MAX_PATH_BYTES:
            raise ToolError(f"the path is {len(encoded)} bytes long; at most {MAX_PATH_BYTES} are allowed")
        if any(len(name) > MAX_NAME_BYTES for name in encoded.split(b"/")):
            raise ToolError(f"a file or folder name in the path is longer than {MAX_NAME_BYTES} bytes")

    @staticmethod
    def _check_allowed(raw: str, parts: tuple[str, ...], session_id: str, for_writing: bool, owner: bool) -> None:
        if not owner and any(parts[: len(owners)] == owners for owners in _OWNERS):
            if for_writing:
                hint = "; the memory tools keep its memory" if parts[0] == "memory" else ""
                raise ToolError(f"{_shown(raw)} cannot be written from this chat{hint}")
            raise ToolError(f"{_shown(raw)} does not exist")
        for shown, private in _PRIVATE:
            if parts[: len(private)] == private:
                raise ToolError(f"{shown} is private to the bot")
        if len(parts) >= 2 and parts[0] == TOOL_RESULTS and parts[1] != session_id:
            raise ToolError("that tool output belongs to another chat")
        if for_writing:
            for shown, read_only in _READ_ONLY:
                if parts[: len(read_only)] == read_only:
                    raise ToolError(f"{shown} is the operator's: it can be read, not changed")

    def display(self, path: Path) -> str:
        return path.relative_to(self._root).as_posix() or "."


class ReadFileArgs(BaseModel):
    path: str = Field(description="file path relative to the workspace, e.g. memory/MEMORY.md")
    offset: int = Field(0, ge=0, description="first line to read, counting from 0")
    limit: int = Field(200, ge=1, le=5000, description="how many lines to read")


class WriteFileArgs(BaseModel):
    path: str = Field(description="file path relative to the workspace")
    content: str = Field(description="the whole new content of the file")


class AppendFileArgs(BaseModel):
    path: str = Field(description="file path relative to the workspace")
    content: str = Field(description="text to add at the end of the file")


class ListDirArgs(BaseModel):
    path: str = Field(".", description="folder path relative to the workspace")


def register_workspace_file_tools(registry: ToolRegistry, workspace_root: Path) -> None:
    jail = WorkspaceJail(workspace_root)

    async def read_file(args: ReadFileArgs, ctx: ToolContext) -> str:
        path = jail.resolve(args.path, ctx.session_id, owner=_sees_owner(ctx))
        if path.is_dir():
            raise ToolError(f"{_shown(args.path)} is a folder; use list_dir")
        _check_regular(args.path, path)
        max_chars = ctx.config.tool_loop.max_read_chars
        try:
            chosen, total = await asyncio.to_thread(_read_lines, path, args.offset, args.limit, max_chars)
        except FileNotFoundError as error:
            raise ToolError(f"{_shown(args.path)} does not exist") from error
        except OSError as error:
            raise ToolError(f"{_shown(args.path)} cannot be read: {error.strerror or type(error).__name__}") from error
        except BinaryFile as error:
            raise ToolError(f"{_shown(args.path)} is a binary file of {error.size} bytes, not text") from error
        body = "\n".join(chosen)
        cut = ""
        if len(body) > max_chars:
            body, cut = body[:max_chars], f"; cut at {max_chars} characters, read fewer lines for the rest"
        last = args.offset + len(chosen)
        more = f"; {total - last} more lines, read with offset={last}" if last < total else ""
        header = f"[{jail.display(path)}: lines {args.offset + 1}-{last} of {total}{more}{cut}]"
        return f"{header}\n{body}"

    def unwritable(raw: str, path: Path, error: OSError) -> ToolError:
        in_the_way = next((folder for folder in path.parents if folder.exists() and not folder.is_dir()), None)
        if in_the_way is not None:
            return ToolError(f"{_shown(raw)} cannot be written: {jail.display(in_the_way)} is a file, not a folder")
        return ToolError(f"{_shown(raw)} cannot be written: {error.strerror or type(error).__name__}")

    async def write_file(args: WriteFileArgs, ctx: ToolContext) -> str:
        _check_size(args.content, ctx)
        path = jail.resolve(args.path, ctx.session_id, for_writing=True, owner=_sees_owner(ctx))
        if path.is_dir():
            raise ToolError(f"{_shown(args.path)} is a folder")
        try:
            await write_atomic(path, args.content.encode("utf-8", "backslashreplace"))
        except OSError as error:  # a file where a folder should be, a full disk, a read-only mount
            raise unwritable(args.path, path, error) from error
        return f"Wrote {len(args.content)} characters to {jail.display(path)}."

    async def append_file(args: AppendFileArgs, ctx: ToolContext) -> str:
        _check_size(args.content, ctx)
        path = jail.resolve(args.path, ctx.session_id, for_writing=True, owner=_sees_owner(ctx))
        if path.is_dir():
            raise ToolError(f"{_shown(args.path)} is a folder")
        _check_regular(args.path, path)
        try:
            await append_text(path, args.content)
        except OSError as error:  # a file where a folder should be, a full disk, a read-only mount
            raise unwritable(args.path, path, error) from error
        return f"Appended {len(args.content)} characters to {jail.display(path)}."

    async def list_dir(args: ListDirArgs, ctx: ToolContext) -> str:
        path = jail.resolve(args.path, ctx.session_id, owner=_sees_owner(ctx))
        if not path.exists():
            raise ToolError(f"{_shown(args.path)} does not exist")
        if not path.is_dir():
            raise ToolError(f"{_shown(args.path)} is not a folder")
        entries = await asyncio.to_thread(_describe_entries, path, jail, ctx.session_id, _sees_owner(ctx))
        return "\n".join(entries) if entries else f"{jail.display(path)} is empty."

    registry.register(Tool("read_file", "Read lines of a text file in the workspace.", ReadFileArgs, read_file))
    registry.register(Tool("write_file", "Create or replace a text file in the workspace.", WriteFileArgs, write_file))
    registry.register(
        Tool("append_file", "Add text to the end of a file in the workspace.", AppendFileArgs, append_file)
    )
    registry.register(Tool("list_dir", "List a folder of the workspace.", ListDirArgs, list_dir))


class BinaryFile(Exception):
    """A file that holds no text (a NUL byte near its start): an image, an archive, a database."""

    def __init__(self, size: int) -> None:
        super().__init__(f"binary file of {size} bytes")
        self.size = size


def _read_lines(path: Path, offset: int, limit: int, max_chars: int) -> tuple[list[str], int]:
    """Lines `offset` to `offset + limit` of a text file, as much of them as `max_chars` can show (one more
    character, so a cut is seen), and how many lines it has: read line by line, so a file of gigabytes
    costs a pass over it, not its size in memory."""
    chosen: list[str] = []
    kept = 0
    total = 0
    with path.open("rb") as raw:
        start = raw.read(BINARY_SNIFF_BYTES)
        # UTF-16 (what some Windows editors save) is text full of NUL bytes, known by its byte order mark.
        encoding = "utf-16" if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
        if encoding != "utf-16" and b"\0" in start:
            raise BinaryFile(os.fstat(raw.fileno()).st_size)
        raw.seek(0)
        with io.TextIOWrapper(raw, encoding=encoding, errors="replace") as text:
            for line in text:
                if offset <= total < offset + limit and kept <= max_chars:
                    line = line.rstrip("\n")[: max_chars + 1 - kept]
                    chosen.append(line)
                    kept += len(line) + 1
                total += 1
    return chosen, total


def _check_regular(raw: str, path: Path) -> None:
    """Refuse a named pipe, a socket or a device: opening one waits for a writer or reader that may never
    come, and would hold a worker thread (and the bot's stop) for good."""
    if path.exists() and not path.is_file():
        raise ToolError(f"{_shown(raw)} is not a regular file (a pipe, a socket or a device)")


def _sees_owner(ctx: ToolContext) -> bool:
    return sees_owner_memory(ctx.session_id, ctx.config.access.allowed_users, ctx.config.memory.owner_memory_everywhere)


def _check_size(content: str, ctx: ToolContext) -> None:
    limit = ctx.config.tool_loop.max_write_chars
    if len(content) > limit:
        raise ToolError(f"the content is {len(content)} characters; at most {limit} can be written at once")


def _describe_entries(folder: Path, jail: WorkspaceJail, session_id: str, owner: bool) -> list[str]:
    entries = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        try:
            jail.resolve(jail.display(Path(entry.path)), session_id, owner=owner)
        except ToolError:
            continue  # not listed: the tools could not open it anyway
        if entry.is_dir(follow_symlinks=False):
            entries.append(f"{entry.name}/")
        else:
            size = entry.stat(follow_symlinks=False).st_size
            entries.append(f"{entry.name} ({size} bytes)")
    if len(entries) > MAX_LISTED_ENTRIES:
        left_out = len(entries) - MAX_LISTED_ENTRIES
        return [*entries[:MAX_LISTED_ENTRIES], f"… and {left_out} more entries, not listed"]
    return entries

"""`TraceFiles`: the recent traces of each chat in the workspace, `state/traces/{session id}.jsonl`, so that a
restart keeps them (one process's: with `BOT_DATABASE_URL` they are in `bot.pipeline.trace_table`)."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from bot.domain.memory import MemoryItem
from bot.domain.session import checked_session_id
from bot.pipeline.trace_records import TurnTrace, redacted, trace_from_json, trace_to_json
from bot.storage.durability import DeferredSync
from bot.storage.files import append_lines, line_bytes, read_text_sync, write_atomic
from bot.storage.jsonl import dumps_line, parse_numbered

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"


@dataclass
class _Chat:
    # The newest traces (after an `add`, no more than it keeps).
    traces: list[TurnTrace] = field(default_factory=list)
    # Lines that are not traces, written back as they were.
    kept_lines: list[str] = field(default_factory=list)
    # How many traces the file holds.
    in_file: int = 0


class TraceFiles:
    """One JSONL file a chat, a trace a line, oldest first. A turn is appended; once the file holds twice
    `kept` traces it is rewritten (atomically) with the newest `kept`, so that a turn costs one append, not
    a rewrite; the newest `kept` a chat are held in memory. A line that is not a trace is logged, left out
    and written back as it was. The files are read once, when first asked for. Given `deferred`, a write
    is made durable by its next round: a trace lost to a crash of the machine is a line missing from the
    console, and a turn need not wait a disk."""

    def __init__(self, folder: Path, deferred: DeferredSync | None = None) -> None:
        self._folder = folder
        self._deferred = deferred
        self._chats: dict[str, _Chat] | None = None
        self._lock = asyncio.Lock()

    async def add(self, trace: TurnTrace, kept: int) -> None:
        async with self._lock:
            chats = await self._loaded()
            chat = chats.setdefault(trace.session_id, _Chat())
            chat.traces.append(trace)
            del chat.traces[:-kept]
            chat.in_file += 1
            if chat.in_file >= 2 * kept:
                await self._rewrite(trace.session_id, chat)
            else:
                await append_lines(self._path(trace.session_id), [dumps_line(trace_to_json(trace))], self._deferred)

    async def chats(self) -> list[str]:
        return sorted(session_id for session_id, chat in (await self._loaded()).items() if chat.traces)

    async def of(self, session_id: str, kept: int) -> list[TurnTrace]:
        chat = (await self._loaded()).get(session_id)
        return chat.traces[-kept:] if chat is not None else []

    async def recent(self, limit: int) -> list[TurnTrace]:
        every = [trace for chat in (await self._loaded()).values() for trace in chat.traces]
        return sorted(every, key=lambda trace: trace.at.timestamp())[-limit:]

    async def forget(self, items: list[MemoryItem]) -> int:
        changed = 0
        async with self._lock:
            for session_id, chat in (await self._loaded()).items():
                shown = [redacted(trace, items) for trace in chat.traces]
                # The file's older traces, past what is held, are not read again: the rewrite drops them.
                if any(trace is not None for trace in shown) or chat.in_file > len(chat.traces):
                    changed += sum(trace is not None for trace in shown)
                    chat.traces = [new or old for new, old in zip(shown, chat.traces, strict=True)]
                    await self._rewrite(session_id, chat)
        return changed

    def _path(self, session_id: str) -> Path:
        return self._folder / f"{checked_session_id(session_id)}{SUFFIX}"

    async def _rewrite(self, session_id: str, chat: _Chat) -> None:
        lines = chat.kept_lines + [dumps_line(trace_to_json(trace)) for trace in chat.traces]
        chat.in_file = len(chat.traces)
        await write_atomic(self._path(session_id), b"".join(line_bytes(line) for line in lines), self._deferred)

    async def _loaded(self) -> dict[str, _Chat]:
        if self._chats is None:
            chats = await asyncio.to_thread(self._read_all)
            if self._chats is None:  # another caller read them meanwhile
                self._chats = chats
        return self._chats

    def _read_all(self) -> dict[str, _Chat]:
        try:
            names = sorted(name for name in os.listdir(self._folder) if name.endswith(SUFFIX))
        except FileNotFoundError:
            return {}
        chats: dict[str, _Chat] = {}
        for name in names:
            path = self._folder / name
            parsed = parse_numbered(read_text_sync(path) or "", path, trace_from_json, "a turn's trace")
            skipped = [line for _, line in parsed.skipped]
            chats[name.removesuffix(SUFFIX)] = _Chat(parsed.records, skipped, len(parsed.records))
        return chats

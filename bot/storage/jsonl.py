"""Reading JSONL files written by `append_lines`: one JSON object per line, torn lines skipped."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from bot.storage.files import read_text_sync, write_atomic

log = logging.getLogger(__name__)

T = TypeVar("T")


def parse_jsonl(text: str, source: Path) -> list[dict[str, Any]]:
    """Every whole JSON object in `text`; a line that does not parse is skipped with a log line."""
    records: list[dict[str, Any]] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            torn_tail = number == len(lines)  # no newline after it: a crash cut the last append short
            log.warning(
                "[Storage] Skipped %s line %d of %s",
                "torn last" if torn_tail else "unreadable",
                number,
                source,
            )
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            log.warning("[Storage] Skipped non-object line %d of %s", number, source)
    return records


@dataclass
class NumberedLines(Generic[T]):
    """What `parse_numbered` made of a file's lines: its records, and the lines it could not take."""

    records: list[T] = field(default_factory=list)
    # (line number, the line as it was)
    skipped: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class CopiedRecords:
    """What copying a JSONL file's records into a table did (`bot migrate`): records written, forgotten
    ones whose rows were deleted, lines that are not records skipped."""

    records: int = 0
    forgotten: int = 0
    skipped_lines: int = 0


def parse_numbered(text: str, source: Path, parse: Callable[[dict[str, Any]], T], what: str) -> NumberedLines[T]:
    """The record `parse` makes of each line of `text` (a JSON object each). A line that is not a JSON
    object, or that `parse` refuses (`KeyError`, `TypeError`, `ValueError`), is logged with its number as
    not `what` and returned apart, for the caller to count or to keep."""
    parsed: NumberedLines[T] = NumberedLines()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            parsed.records.append(parse(record))
        except (KeyError, TypeError, ValueError) as error:
            log.warning("[Storage] Skipped line %d of %s (not %s): %s", number, source, what, error)
            parsed.skipped.append((number, line))
    return parsed


def read_jsonl_sync(path: Path) -> list[dict[str, Any]]:
    text = read_text_sync(path)
    return [] if text is None else parse_jsonl(text, path)


async def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return await asyncio.to_thread(read_jsonl_sync, path)


def dumps_line(record: object) -> str:
    """One JSONL line: compact, UTF-8 kept readable, no newline inside."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


async def write_records(path: Path, records: list[Any]) -> int:
    """Replace the file at `path` (atomically) with `records`, one `dumps_line` each; how many were written
    (none: the file is left as it is). `bot export` writes each JSONL file of the workspace so."""
    if not records:
        return 0
    lines = "".join(dumps_line(record) + "\n" for record in records)
    await write_atomic(path, lines.encode("utf-8", "backslashreplace"))
    return len(records)

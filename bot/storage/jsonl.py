"""Reading JSONL files written by `append_lines`: one JSON object per line, torn lines skipped."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from bot.storage.files import read_text_sync

log = logging.getLogger(__name__)


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


def read_jsonl_sync(path: Path) -> list[dict[str, Any]]:
    text = read_text_sync(path)
    return [] if text is None else parse_jsonl(text, path)


async def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return await asyncio.to_thread(read_jsonl_sync, path)


def dumps_line(record: object) -> str:
    """One JSONL line: compact, UTF-8 kept readable, no newline inside."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))

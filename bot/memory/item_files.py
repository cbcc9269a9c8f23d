"""Reading memory item files (JSONL): valid items, and the lines that are not, kept as they were.

A hand-edited file is input, not trusted data: `parse_item_file` skips what does not parse and keeps
its text, so every rewrite puts it back byte for byte (see `MemoryItemStore`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path

from pydantic import ValidationError

from bot.domain.memory import MemoryItem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeptLine:
    """A line of an items file that is not a valid item: skipped when read, written back as it was."""

    text: str


@dataclass
class ParsedItems:
    """A JSONL file read: its valid items, and its layout (item ids and kept lines, in file order)."""

    items: list[MemoryItem]
    layout: list[str | KeptLine]
    skipped: int
    # The lines skipped: each one's number (counted from 1) and what is wrong with it, in file order.
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    # Each item's line as read (parallel to `items`), so an unchanged item is written back as it was.
    lines: list[str] = field(default_factory=list)
    # The last line is whole (an item or a kept line) but has no newline after it, as editors that
    # save without a final newline leave it: an append must not cut it off as a torn tail.
    unterminated: bool = False


def parse_item_file(text: str, source: Path, zone: tzinfo = UTC) -> ParsedItems:
    """Every valid item of a JSONL file's text; other lines are skipped with one warning each.

    A hand-edited file is input, not trusted data: a line that is not JSON, has an unknown layer, an
    unreadable date or misses a field is skipped, counted and kept (its text goes back into the file
    on every rewrite); a time without a zone is read in `zone`. Only a torn last line (no newline
    after it: a crash cut the last append short) is dropped, which repairs it on the next rewrite.
    Parsed straight from JSON by pydantic (three times faster than `json.loads` and validating, which
    is most of the start-up time at 100,000 items).
    """
    parsed = ParsedItems([], [], 0)
    context = {"zone": zone}
    lines = text.split("\n")
    # Each item's id: the line it is on, and its place in the layout.
    seen: dict[str, tuple[int, int]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = MemoryItem.model_validate_json(line, context=context)
        except ValidationError as error:
            problem = error.errors()[0]
            torn_tail = number == len(lines) and problem["type"] == "json_invalid"
            if torn_tail:
                log.warning("[Memory] Skipped torn last line %d of %s", number, source)
                continue
            where = ".".join(str(part) for part in problem["loc"]) or "line"
            reason = f"{where}: {problem['msg']}"
            log.warning("[Memory] Skipped line %d of %s (kept in the file): %s", number, source, reason)
            parsed.layout.append(KeptLine(line))
            parsed.skipped += 1
            parsed.skipped_lines.append((number, reason))
        else:
            if item.id in seen:
                _keep_the_earlier(parsed, *seen[item.id], number, item.id, source)
            seen[item.id] = (number, len(parsed.layout))
            parsed.items.append(item)
            parsed.lines.append(line)
            parsed.layout.append(item.id)
        parsed.unterminated = number == len(lines)
    return parsed


def _keep_the_earlier(parsed: ParsedItems, number: int, place: int, later: int, item_id: str, source: Path) -> None:
    """An id given again further down (a line copied to write a new fact, its id left as it was): the later line
    is the item, the earlier one is skipped and kept as it is, so no rewrite drops what a person wrote."""
    index = sum(1 for entry in parsed.layout[:place] if not isinstance(entry, KeptLine))
    del parsed.items[index]
    parsed.layout[place] = KeptLine(parsed.lines.pop(index))
    reason = f"id {item_id} is given again on line {later}, which is used; give one of them a new id to keep both"
    parsed.skipped += 1
    parsed.skipped_lines = sorted([*parsed.skipped_lines, (number, reason)])
    log.warning("[Memory] Skipped line %d of %s (kept in the file): %s", number, source, reason)


def parse_items(text: str, source: Path, zone: tzinfo = UTC) -> list[MemoryItem]:
    """The valid items of a JSONL file's text (see `parse_item_file`)."""
    return parse_item_file(text, source, zone).items


def read_raw(path: Path) -> str:
    """A file's text with undecodable bytes kept as surrogate escapes, so a rewrite gives them back."""
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return ""

"""Helpers for the memory tests: talk to the bot, configure memory, split the prompt, make items."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.domain.text import fingerprint_of
from bot.storage.jsonl import dumps_line
from tests.fakes.recording_channel import RecordingChannel


async def say(services: Application, channel: RecordingChannel, chat_id: str, text: str) -> str:
    """Send `text` and wait until the whole turn (reply, memory writes and vectors after it) is done."""
    before = len(channel.sent[chat_id])
    await services.router.accept(channel.message(chat_id, text), channel)
    reply = (await channel.wait_for(chat_id, before + 1))[-1]
    await services.router.dispatcher.drain()
    await services.memory.settle()  # item vectors are made in the background
    return reply


def configure_memory(services: Application, **memory: Any) -> None:
    path = services.workspace.runtime_config_file
    path.write_text(json.dumps({"memory": memory}))
    # A distinct mtime even within one filesystem timestamp tick.
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def memory_section(system_prompt: str | None) -> str | None:
    """The `# Memory` part of a system prompt (up to the end), or None when there is none."""
    assert system_prompt is not None
    start = system_prompt.find("# Memory\n")
    return None if start == -1 else system_prompt[start:]


def item(
    layer: MemoryLayer,
    content: str,
    at: datetime,
    *,
    type_: str = "fact",
    confidence: float = 0.8,
    salience: float = 0.5,
    item_id: str | None = None,
    **extra: Any,
) -> MemoryItem:
    values: dict[str, Any] = {
        "layer": layer,
        "type": type_,
        "content": content,
        "created_at": at,
        "updated_at": at,
        "confidence": confidence,
        "salience": salience,
        "fingerprint": fingerprint_of(content),
        "source": "test:1",
        **extra,
    }
    if item_id:
        values["id"] = item_id
    return MemoryItem(**values)


def write_items(path: Path, items: list[MemoryItem]) -> None:
    """Append `items` to a JSONL file as a person (or an older version of the bot) would have."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(dumps_line(entry.to_json_dict()) + "\n" for entry in items))


def read_items(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

"""Runs memory maintenance over a workspace: the victim of the kill test."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path

from bot.clock import Clock
from bot.llm.client import LlmClient
from bot.memory.maintenance import run_maintenance
from bot.memory.service import MemoryService
from bot.settings import MemoryConfig
from bot.workspace import Workspace


async def main(root: Path) -> None:
    memory = MemoryService(Workspace(root), Clock(UTC), LlmClient("unused", "http://127.0.0.1:9/v1"))
    config = MemoryConfig(note_retention_days=30)
    await run_maintenance(memory, config, datetime(2026, 11, 22, tzinfo=UTC))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

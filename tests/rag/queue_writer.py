"""Run as a process by test_store.py: queue documents, then die by SIGKILL without any clean-up."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bot.rag.documents import RagDocument
from bot.rag.store import RagDocumentStore


async def main(path: Path, count: int) -> None:
    store = RagDocumentStore(path)
    for index in range(count):
        await store.add(RagDocument(f"conv_test_1_{index}", "test:1", "global", f"exchange {index}", ""))
    print("QUEUED", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))

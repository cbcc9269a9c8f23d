"""Fixtures of the RAG tests: a bot wired as `python -m bot` wires it, with RAG tuned small and fast."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI
from tests.rag.helpers import build_rag_bot, rag_of


@pytest.fixture
async def rag_bot(workspace_dir: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Application]:
    built = build_rag_bot(workspace_dir, fake_openai)
    yield built
    await built.stop()
    await rag_of(built).close()

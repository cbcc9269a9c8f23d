"""Fixtures of the compaction tests: a bot whose model has a 4,000-token window."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import Application
from tests.compaction.helpers import LimitedModel, build_small
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
def limited_model(fake_openai: FakeOpenAI) -> LimitedModel:
    model = LimitedModel()
    fake_openai.set_responder(model)
    return model


@pytest.fixture
async def small_services(
    workspace_dir: Path, fake_openai: FakeOpenAI, limited_model: LimitedModel
) -> AsyncIterator[Application]:
    built = build_small(workspace_dir, fake_openai)
    yield built
    await built.stop()

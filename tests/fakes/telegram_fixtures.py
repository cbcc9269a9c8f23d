"""Pytest plugin: the `fake_telegram` fixture (listed in tests/conftest.py's pytest_plugins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    """A started `FakeTelegram` on 127.0.0.1 (own thread and loop), stopped after the test.

    Works in sync and async tests alike; point the bot at `fake_telegram.root` with token
    `fake_telegram.token`.
    """
    with FakeTelegram() as fake:
        yield fake

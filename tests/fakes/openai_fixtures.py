"""Pytest plugin (listed in ``tests/conftest.py``) providing the ``fake_openai`` fixture."""

from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started ``FakeOpenAI`` (echo responder, no API key required), stopped after the test.

    A plain sync fixture: the server runs in its own thread, so sync tests, async tests and
    subprocesses (via ``fake_openai.base_url``) can all use it.
    """
    with FakeOpenAI() as fake:
        yield fake

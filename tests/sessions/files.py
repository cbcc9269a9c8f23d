"""The files of a `SessionService` kept in the workspace, for the tests and benchmarks that look at them."""

from __future__ import annotations

from bot.sessions.service import SessionService
from bot.sessions.storage import SessionFiles


def sessions_files(sessions: SessionService) -> SessionFiles:
    """The session files and archive of `sessions` (which must keep its sessions in files)."""
    storage = sessions.storage
    assert isinstance(storage, SessionFiles), "these sessions are not kept in files"
    return storage

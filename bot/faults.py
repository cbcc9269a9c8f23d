"""Crash points: named steps at which a test makes the process die as a power cut or `kill -9` would.

`BOT_CRASH_AT=NAME` in the environment kills the process (SIGKILL, nothing flushed, nothing let go but
what the kernel lets go) when it reaches the step `NAME`; unset, a crash point does nothing. The tests
of what a crash between two writes leaves behind set it; nobody else has a reason to.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

CRASH_VARIABLE = "BOT_CRASH_AT"
# The ledger claimed a transport key and has not recorded what the key brought.
UPDATE_CLAIMED = "update-claimed"


def crash_point(name: str) -> None:
    """Die here when `BOT_CRASH_AT` names this step."""
    if os.environ.get(CRASH_VARIABLE) == name:
        log.warning("[Faults] %s=%s: killing the process", CRASH_VARIABLE, name)
        os.kill(os.getpid(), signal.SIGKILL)

"""`python -m bot ARGS` as a real process that starts with the application already imported.

A process started with `python -m bot run` spends seconds of CPU importing the application and its
Telegram library (the model client's types, aiogram's hundreds of models) before its first line; the
tests that kill, stop and restart bots start dozens. Here each is forked from a server process of the
test worker that imported them once (multiprocessing's fork server): a process of its own, with its own
pid, environment, working directory and streams, that runs `bot.__main__.main` as `python -m bot`
runs it, takes signals and exits with its own status. What a fresh interpreter does before `main` (its
imports, `python -m bot` itself) is tested by the tests that start one.

Nothing here may import the application: the forked process imports this module to find `_main`.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from pathlib import Path

# What the fork server imports once: the command line, the application, and the Telegram backend of the first
# bot process it starts. The tests of the aiogram backend run on one worker (`tests/conftest.py`): the other
# workers' servers would hold aiogram's models (about 120 MB) for nothing. A bot of the other backend imports
# its library itself.
PRELOADED = ["bot.__main__", "bot.app"]
BACKEND_MODULES = {"ptb": "bot.channels.telegram_ptb", "aiogram": "bot.channels.telegram_aiogram"}

# The modules whose tests start bot processes here. The fork server holds the application's memory (about
# 250 MB): it is started by the first bot process and stopped when the worker moves on to a test of
# another module (`tests/conftest.py` runs these modules first, so a worker goes through them together).
MODULES = (
    "tests/reliability/test_crash_loop.py",
    "tests/reliability/test_graceful_stop.py",
    "tests/reliability/test_load.py",
    "tests/database/test_replicas.py",
)

_context = multiprocessing.get_context("forkserver")


def stop_server() -> None:
    """Stop the fork server, if it runs (the next bot process starts it again)."""
    server = multiprocessing.forkserver._forkserver
    server._stop()  # type: ignore[attr-defined]  # the standard library's own tests stop it so


class BotProcess:
    """The started process, with what the tests use of `subprocess.Popen`."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        self.args = ["python", "-m", "bot"]

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status; minus the signal's number when a signal ended it (as `Popen.returncode`)."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, number: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(args: list[str], env: dict[str, str], *, stderr: Path | None = None, cwd: Path | None = None) -> BotProcess:
    """`python -m bot ARGS` with exactly `env` as its environment; its stderr appended to the file `stderr`
    (else discarded), stdin and stdout `/dev/null`."""
    if multiprocessing.forkserver._forkserver._forkserver_pid is None:  # type: ignore[attr-defined]
        backend = BACKEND_MODULES.get(env.get("TELEGRAM_BACKEND", "ptb"), BACKEND_MODULES["ptb"])
        _context.set_forkserver_preload([*PRELOADED, backend])  # the server starts with this process
    process = _context.Process(target=_main, args=(args, env, str(stderr) if stderr else None, cwd), daemon=False)
    process.start()
    return BotProcess(process)


def _main(args: list[str], env: dict[str, str], stderr: str | None, cwd: Path | None) -> None:
    """In the forked process: the environment, directory and streams `python -m bot` would have, then `main`."""
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if stderr is not None:
        log = os.open(stderr, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(log, 2)
        os.close(log)
    else:
        os.dup2(null, 2)
    os.close(null)
    from bot.__main__ import main

    sys.exit(main(args))

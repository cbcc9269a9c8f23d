"""`python -m bot ARGS` run in the test's own process: `bot.__main__.main` with the environment, working
directory and standard streams a process would have, and what it printed and returned given back as the
process's would be (`subprocess.CompletedProcess`).

A process costs the interpreter's start and the application's import (more than a second of CPU each
time); a test whose subject is what a command says and writes, not the process, runs it here. The tests
whose subject is the process (exit by a signal, a real pipe or terminal on stdin, what a fresh
interpreter imports, `python -m bot` itself) start one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

# The MCP client takes `sys.stderr` as its servers' stderr when it is first imported (a default argument):
# imported here, before a command's streams are swapped, it keeps the process's own.
import mcp.client.stdio  # noqa: F401

from bot.__main__ import main
from bot.logging_setup import CHATTY_LIBRARIES


@contextmanager
def logging_kept() -> Iterator[None]:
    """The process's logging as it was before the block: `configure_logging` (run by `main` or by a test)
    replaces the root's handlers and level, the record factory, the chatty libraries' levels and
    `sys.excepthook`; each is put back, and the handlers it added are closed (a log file among them)."""
    root = logging.getLogger()
    handlers, level, factory, excepthook = root.handlers[:], root.level, logging.getLogRecordFactory(), sys.excepthook
    levels = {name: logging.getLogger(name).level for name in CHATTY_LIBRARIES}
    try:
        yield
    finally:
        added = [handler for handler in root.handlers if handler not in handlers]
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.setLogRecordFactory(factory)
        sys.excepthook = excepthook
        for name, library_level in levels.items():
            logging.getLogger(name).setLevel(library_level)
        for handler in added:
            handler.close()


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """`os.environ` exactly `env` in the block (a process started with `env` sees only it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_main(args: list[str], env: dict[str, str], cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m bot ARGS` with `env` as its environment, `cwd` as its working directory (where `.env` is
    read) and `stdin` as its input: its exit status, stdout and stderr.

    The three streams are files, as a process's are: what hands a descriptor on (an MCP server's stderr,
    the terminal chat's input) gets one."""
    saved_stdin, saved_cwd = sys.stdin, Path.cwd()
    umask = os.umask(0o022)
    os.umask(umask)
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8") as given,
        tempfile.TemporaryFile("w+", encoding="utf-8") as stdout,
        tempfile.TemporaryFile("w+", encoding="utf-8") as stderr,
    ):
        given.write(stdin)
        given.seek(0)
        sys.stdin = given
        os.chdir(cwd)
        try:
            with _environment(env), logging_kept(), redirect_stdout(stdout), redirect_stderr(stderr):
                try:
                    code = main(args)
                except SystemExit as leaving:  # argparse's --help and usage errors
                    code = leaving.code if isinstance(leaving.code, int) else 1
        finally:
            sys.stdin = saved_stdin
            os.chdir(saved_cwd)
            os.umask(umask)
        stdout.seek(0)
        stderr.seek(0)
        return subprocess.CompletedProcess(["bot", *args], code, stdout.read(), stderr.read())

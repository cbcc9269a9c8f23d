"""The setup commands run as a person runs them: real processes, with the fake Bot API and the fake model."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


def setup_env(workspace: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, **extra: str) -> dict[str, str]:
    """The environment of a working setup against the fakes; `extra` changes or adds variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace),
        OPENAI_BASE_URL=fake_openai.base_url,
        OPENAI_API_KEY=TEST_API_KEY,
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_BASE_URL=fake_telegram.root,
        BOT_TIMEZONE="UTC",
    )
    env.update(extra)
    return {key: value for key, value in env.items() if value != ""}


def run_command(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


class Terminal:
    """`python -m bot ARGS` in a pseudo-terminal: what it prints is read, answers are typed."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pseudo-terminal is its controlling terminal, as a person's would be
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "bot", *args], env)
        self.pid, self.fd = pid, fd
        self.screen = ""
        # Where the next `expect` starts looking: past what an earlier one matched.
        self._seen = 0

    def expect(self, text: str, timeout: float = 60) -> str:
        """Wait for `text` to appear after what was matched before; returns what appeared up to its end."""
        deadline = time.monotonic() + timeout
        while text not in self.screen[self._seen :]:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never appeared; the screen:\n{self.screen}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.screen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    assert text in self.screen[self._seen :], f"{text!r} never appeared; the screen:\n{self.screen}"
        end = self.screen.index(text, self._seen) + len(text)
        shown, self._seen = self.screen[self._seen : end], end
        return shown

    def type(self, answer: str) -> None:
        os.write(self.fd, answer.encode() + b"\r")

    def exit_status(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with_select = select.select([self.fd], [], [], 0.1)[0]
            if with_select:
                try:
                    self.screen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:
                    pass
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"onboard did not finish; the screen:\n{self.screen}")

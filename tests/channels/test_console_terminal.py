"""`python -m bot chat` in a real terminal: a pseudo-terminal (the standard library's `pty`) runs the
command against the fake model, and the test types into it as a person would: a one-line banner,
line editing with the arrow keys, a 20,000-character paste that arrives whole (the terminal's own line
discipline would cut it at 4,095), the history kept for the next chat, log lines in the workspace's
log file and none on the screen, Ctrl-D to leave."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import pytest

from bot.channels import console
from bot.channels.console import ConsoleChannel
from bot.domain.inbound import InboundMessage
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import WAIT_SECONDS
from tests.test_cli import bot_env

UP = b"\x1b[A"
LEFT = b"\x1b[D"
CTRL_D = b"\x04"
CTRL_C = b"\x03"


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pseudo-terminal, so that Ctrl-C
    there is a SIGINT to it, as in a shell."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """`python -m bot chat` on the far side of a pseudo-terminal of 120 columns."""

    def __init__(self, workspace: Path, fake_openai: FakeOpenAI) -> None:
        env = bot_env(workspace, fake_openai, TERM="xterm")
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.canonical = termios.tcgetattr(slave)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "chat"], stdin=slave, stdout=slave, stderr=slave, env=env,
            cwd=workspace.parent, preexec_fn=_own_terminal,
        )  # fmt: skip
        self.slave = slave
        self.screen = b""

    def read_until(self, done: Callable[[bytes], bool], timeout: float = 30.0) -> bytes:
        deadline = time.monotonic() + timeout
        while not done(self.screen):
            if time.monotonic() > deadline:
                raise AssertionError(f"not on the screen in time; last: {self.screen[-300:]!r}")
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:  # the far side closed
                    break
        return self.screen

    def rest(self) -> bytes:
        """Everything the far side printed, once it closed its end."""
        while select.select([self.master], [], [], 0.5)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.screen += chunk
        return self.screen

    def type(self, keys: bytes) -> None:
        """Keys as a paste delivers them: all at once, read on the far side while they are written."""
        view = memoryview(keys)
        while view:
            _, writable, _ = select.select([self.master], [self.master], [], 1.0)
            if self.master in _:
                self.screen += os.read(self.master, 65536)
            if writable:
                view = view[os.write(self.master, view[:4096]) :]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def terminal(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Terminal]:
    opened = Terminal(tmp_path / "workspace", fake_openai)
    yield opened
    opened.close()


def user_messages(fake_openai: FakeOpenAI) -> list[str]:
    """The user messages of the last reply's request (the knowledge graph's extraction calls, which the
    chat makes once it has been quiet a while, are not replies)."""
    return [m["content"] for m in fake_openai.conversation_requests()[-1]["messages"] if m["role"] == "user"]


def test_a_terminal_chat_edits_lines_takes_a_long_paste_whole_and_keeps_logs_off_the_screen(
    terminal: Terminal, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    screen = terminal.read_until(lambda s: s.endswith(b"> "))
    [banner, prompt] = screen.decode().split("\r\n")
    assert banner.startswith("memory-bot · model gpt-4o-mini · workspace ")
    assert str(workspace) in banner and "/help" in banner and "Ctrl-D" in banner and "logs/chat.log" in banner
    assert prompt == "> "

    # Arrow keys edit the line: "helo", left once, "l" -> "hello".
    terminal.type(b"helo" + LEFT + b"l\r")
    terminal.read_until(lambda s: b"echo: hello" in s)
    assert user_messages(fake_openai) == ["hello"]

    pasted = "".join(f"{i:05d} " for i in range(20_000 // 6)) + "end"
    assert len(pasted) > 20_000 - 6
    terminal.type(pasted.encode() + b"\r")
    terminal.read_until(lambda s: b"echo: 00000" in s and s.endswith(b"end\r\n> "), timeout=60)
    assert user_messages(fake_openai)[-1] == pasted  # whole, nothing cut at 4,095

    # A terminal marks a paste (bracketed paste): its lines are one message.
    terminal.type(b"\x1b[200~first line\nsecond line\x1b[201~\r")
    terminal.read_until(lambda s: b"echo: first line" in s and s.endswith(b"second line\r\n> "))
    assert user_messages(fake_openai)[-1] == "first line\nsecond line"

    # Up brings back the last line from the history.
    terminal.type(UP * 3 + b"\r")
    terminal.read_until(lambda s: s.count(b"echo: hello") >= 2)
    assert user_messages(fake_openai)[-1] == "hello"
    assert "\x1b" not in "".join(user_messages(fake_openai))

    terminal.type(CTRL_D)
    assert terminal.process.wait(timeout=WAIT_SECONDS) == 0
    on_screen = terminal.rest().decode(errors="replace")
    assert "INFO" not in on_screen and "WARNING" not in on_screen and "[App]" not in on_screen
    log_text = (workspace / "logs" / "chat.log").read_text()
    assert "[Pipeline] console:local answered" in log_text and "[App] Stopped" in log_text
    assert termios.tcgetattr(terminal.slave)[3] == terminal.canonical[3]  # the terminal is given back as it was
    history = (workspace / "state" / "chat-history").read_text().splitlines()
    assert history[:2] == ["hello", pasted]


def test_the_history_is_there_in_the_next_chat_and_ctrl_c_leaves(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    workspace = tmp_path / "workspace"
    first = Terminal(workspace, fake_openai)
    try:
        first.read_until(lambda s: s.endswith(b"> "))
        first.type(b"remember this line\r")
        first.read_until(lambda s: b"echo: remember this line" in s)
        first.type(CTRL_D)
        assert first.process.wait(timeout=WAIT_SECONDS) == 0
    finally:
        first.close()
    second = Terminal(workspace, fake_openai)
    try:
        second.read_until(lambda s: s.endswith(b"> "))
        second.type(UP + b"\r")
        # The reply, then the prompt drawn again: what is typed before it is echoed ahead of it.
        second.read_until(lambda s: b"echo: remember this line" in s and s.endswith(b"> "))
        assert user_messages(fake_openai)[-1] == "remember this line"
        # Ctrl-C in the middle of a line leaves too, and gives the terminal back as it was.
        second.type(b"half a line")
        second.read_until(lambda s: s.endswith(b"half a line"))
        second.type(CTRL_C)
        assert second.process.wait(timeout=WAIT_SECONDS) == 0
        assert termios.tcgetattr(second.slave)[3] == second.canonical[3]
    finally:
        second.close()


async def test_a_piped_line_past_the_limit_is_not_sent_and_says_so_and_the_next_lines_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "MAX_PIPED_LINE_BYTES", 1000)
    read_end, write_end = os.pipe()
    os.write(write_end, b"a" * 5000 + b"\nnext line\n")
    os.close(write_end)
    shown = io.StringIO()
    channel = ConsoleChannel(stdin=os.fdopen(read_end), stdout=shown)
    received: list[str] = []

    async def handler(inbound: InboundMessage) -> None:
        received.append(inbound.text)

    await channel.start(handler)
    await asyncio.wait_for(channel.input_closed.wait(), 10)
    await channel.stop()
    assert received == ["next line"]
    assert shown.getvalue() == "That line is longer than 1,000 bytes; it was not sent.\n"


LINES = "first line\n\nsecond line, no newline at the end"


def standard_input(given: str, folder: Path) -> tuple[TextIO, list[str]]:
    """The stream given as standard input, and the messages it holds."""
    expected = ["first line", "second line, no newline at the end"]
    if given == "a file":
        (folder / "notes.txt").write_text(LINES)
        return open(folder / "notes.txt"), expected
    if given == "/dev/null":
        return open(os.devnull), []
    return io.StringIO(LINES), expected


@pytest.mark.parametrize("given", ["a file", "/dev/null", "text in memory"])
async def test_a_file_or_dev_null_as_standard_input_is_read_to_its_end(given: str, tmp_path: Path) -> None:
    """`bot chat < notes.txt` and `bot chat < /dev/null`: the event loop cannot wait on either, so each
    is read through a relay and the chat closes at its end."""
    stdin, expected = standard_input(given, tmp_path)
    channel = ConsoleChannel(stdin=stdin, stdout=io.StringIO())
    received: list[str] = []

    async def handler(inbound: InboundMessage) -> None:
        received.append(inbound.text)

    try:
        await channel.start(handler)
        await asyncio.wait_for(channel.input_closed.wait(), 10)
        await channel.stop()
    finally:
        stdin.close()
    assert received == expected

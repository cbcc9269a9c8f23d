"""`ConsoleChannel`: the terminal as a chat (`python -m bot chat`), channel `console`, chat `local`.

Each line typed is a message; replies are printed as they are ready. In a terminal the line is edited
with readline (`TerminalLines`: no length cut, arrow keys and a history kept in the workspace) and
the chat opens with a one-line banner; from a pipe or a file each line is read as it is. End of input
(Ctrl-D, or the end of a piped file) closes the channel once every message was answered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import TextIO

from bot.channels.base import Channel, InboundHandler
from bot.channels.terminal import TerminalLines, readline_available
from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream

log = logging.getLogger(__name__)

CONSOLE_CHAT_ID = "local"
CONSOLE_USER_ID = "owner"
# A piped line may be this long; a longer one is refused with a message, never cut.
MAX_PIPED_LINE_BYTES = 16 * 1024 * 1024
# How much of a file given as standard input the relay reads at once.
RELAY_CHUNK_BYTES = 64 * 1024
# Escape sequences (a function key readline does not know, colours in a pasted text) and control
# characters other than tab and newline: never part of what the person meant to say.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]")


def typed_text(line: str) -> str:
    """A typed or piped line as a message: its line ending, escape sequences and control characters gone."""
    return _CONTROL.sub("", line.rstrip("\r\n"))


def _watchable(stream: TextIO) -> bool:
    """Whether the event loop can wait on the stream: a pipe, a socket or a terminal. A regular file
    (`bot chat < notes.txt`) and `/dev/null` cannot be waited on by epoll."""
    try:
        descriptor = stream.fileno()
        mode = os.fstat(descriptor).st_mode
    except (OSError, ValueError):  # no descriptor (io.UnsupportedOperation is both)
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(descriptor)


def _relayed(stream: TextIO) -> socket.socket:
    """A socket that carries what `stream` holds, copied by a thread: the loop reads it as it reads a
    pipe, a full socket buffer holds the copy back (a large file is not read into memory ahead of the
    chat), and the end of the stream closes it."""
    ours, theirs = socket.socketpair()

    def read_chunk() -> bytes:
        try:
            return os.read(stream.fileno(), RELAY_CHUNK_BYTES)
        except (OSError, ValueError):
            return stream.read(RELAY_CHUNK_BYTES).encode("utf-8", "surrogateescape")

    def copy() -> None:
        with theirs:
            try:
                while chunk := read_chunk():
                    theirs.sendall(chunk)
            except OSError:  # the chat stopped and closed its end
                return

    threading.Thread(target=copy, name="console-input", daemon=True).start()
    return ours


class ConsoleChannel(Channel):
    """Reads messages from standard input and prints replies to standard output."""

    channel_type = "console"

    def __init__(
        self,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        *,
        history_file: Path | None = None,
        banner: str | None = None,
    ) -> None:
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._history_file = history_file
        self._banner = banner
        self._reader_task: asyncio.Task[None] | None = None
        self._terminal: TerminalLines | None = None
        self._line_open = False
        self.input_closed = asyncio.Event()

    @property
    def interactive(self) -> bool:
        """Whether a person types in a terminal (readline, a banner), rather than a pipe or file feeding lines."""
        return self._stdin.isatty() and self._stdout.isatty() and readline_available()

    async def start(self, handler: InboundHandler) -> None:
        if self.interactive:
            await self._start_terminal(handler)
            return
        reader = asyncio.StreamReader(limit=MAX_PIPED_LINE_BYTES)
        loop = asyncio.get_running_loop()
        source = self._stdin if _watchable(self._stdin) else _relayed(self._stdin)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), source)
        self._reader_task = asyncio.create_task(self._read_lines(reader, handler))

    async def _start_terminal(self, handler: InboundHandler) -> None:
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._terminal = TerminalLines(self._stdin, self._stdout, self._history_file)
        if self._banner:
            self._write(self._banner + "\n")
        self._terminal.start(lines.put_nowait, lambda: lines.put_nowait(None))

        async def take_lines() -> None:
            try:
                while (line := await lines.get()) is not None:
                    await self._hand_on(line, handler)
            finally:
                self.input_closed.set()

        self._reader_task = asyncio.create_task(take_lines())

    async def _read_lines(self, reader: asyncio.StreamReader, handler: InboundHandler) -> None:
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:  # the end of input, after a last line with no newline
                    if end.partial:
                        await self._hand_on(end.partial.decode("utf-8", errors="replace"), handler)
                    break
                except asyncio.LimitOverrunError as overrun:  # left in the buffer: dropped up to its line's end
                    await self._skip_long_line(reader, overrun.consumed)
                    continue
                await self._hand_on(raw.decode("utf-8", errors="replace"), handler)
        finally:
            self.input_closed.set()

    async def _skip_long_line(self, reader: asyncio.StreamReader, consumed: int) -> None:
        self._write(f"That line is longer than {MAX_PIPED_LINE_BYTES:,} bytes; it was not sent.\n")
        log.warning("[Console] A piped line over %d bytes was not sent", MAX_PIPED_LINE_BYTES)
        while True:
            try:
                await reader.readexactly(consumed)
                await reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as overrun:
                consumed = overrun.consumed
            except asyncio.IncompleteReadError:
                return

    async def _hand_on(self, line: str, handler: InboundHandler) -> None:
        text = typed_text(line)
        if text.strip():
            await handler(InboundMessage(self.channel_type, CONSOLE_CHAT_ID, CONSOLE_USER_ID, text))

    async def stop_receiving(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_receiving()
        if self._terminal is not None:
            self._terminal.close()
            self._terminal = None

    async def send_text(self, chat_id: str, text: str) -> str | None:
        self._end_open_line()
        self._write(text.rstrip("\n") + "\n")
        return None

    def open_stream(self, chat_id: str) -> ReplyStream | None:
        return _ConsoleStream(self)

    def _write(self, text: str) -> None:
        if self._terminal is not None:
            self._terminal.write(text)
        else:
            self._stdout.write(text)
            self._stdout.flush()
        self._line_open = not text.endswith("\n")

    def _end_open_line(self) -> None:
        # A streamed reply cut short (an error, /stop) leaves its line open; start the next on its own.
        if self._line_open:
            self._write("\n")

    async def edit_text(self, chat_id: str, message_id: str, text: str) -> None:
        # A terminal cannot rewrite what it printed; the final text is sent with send_text.
        return None

    async def send_typing(self, chat_id: str) -> None:
        return None


class _ConsoleStream:
    """Prints a reply as it is written: each update adds what is new since the last one."""

    def __init__(self, console: ConsoleChannel) -> None:
        self._console = console
        self._shown = ""

    async def update(self, text: str) -> None:
        if text.startswith(self._shown):
            self._console._write(text[len(self._shown) :])
        else:
            self._console._end_open_line()
            self._console._write(text)
        self._shown = text

    async def finish(self, text: str) -> None:
        await self.update(text.rstrip("\n"))
        self._console._write("\n")

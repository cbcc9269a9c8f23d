"""`ConsoleChannel`: the terminal as a chat (`python -m bot chat`), channel `console`, chat `local`.

Each line typed is a message; replies are printed as they are ready. End of input (Ctrl-D, or the
end of a piped file) closes the channel once every message was answered.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TextIO

from bot.channels.base import Channel, InboundHandler
from bot.domain.inbound import InboundMessage
from bot.domain.turn import ReplyStream

log = logging.getLogger(__name__)

CONSOLE_CHAT_ID = "local"
CONSOLE_USER_ID = "owner"


class ConsoleChannel(Channel):
    """Reads messages from standard input and prints replies to standard output."""

    channel_type = "console"

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._reader_task: asyncio.Task[None] | None = None
        self._line_open = False
        self.input_closed = asyncio.Event()

    async def start(self, handler: InboundHandler) -> None:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self._stdin)
        self._reader_task = asyncio.create_task(self._read_lines(reader, handler))

    async def _read_lines(self, reader: asyncio.StreamReader, handler: InboundHandler) -> None:
        try:
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if text.strip():
                    await handler(InboundMessage(self.channel_type, CONSOLE_CHAT_ID, CONSOLE_USER_ID, text))
        finally:
            self.input_closed.set()

    async def stop_receiving(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_receiving()

    async def send_text(self, chat_id: str, text: str) -> str | None:
        self._end_open_line()
        self._write(text.rstrip("\n") + "\n")
        return None

    def open_stream(self, chat_id: str) -> ReplyStream | None:
        return _ConsoleStream(self)

    def _write(self, text: str) -> None:
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

"""`RecordingChannel`: an in-process channel that records what the bot delivers, for pipeline tests."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from bot.channels.base import Channel, FileUnavailable, InboundHandler
from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.turn import ReplyStream
from tests.fakes.telegram_server import WAIT_SECONDS


class RecordingChannel(Channel):
    """Delivers nothing anywhere: every reply is kept per chat for assertions."""

    channel_type = "test"

    def __init__(self, fail_sends: int = 0, streaming: bool = False) -> None:
        self.sent: dict[str, list[str]] = defaultdict(list)
        self.stream_updates: dict[str, list[str]] = defaultdict(list)
        self._streaming = streaming
        self.typing: dict[str, int] = defaultdict(int)
        self.handler: InboundHandler | None = None
        self._fail_sends = fail_sends
        self._changed = asyncio.Condition()
        # The files users sent, by file id, for `download`.
        self.files: dict[str, bytes] = {}

    async def start(self, handler: InboundHandler) -> None:
        self.handler = handler

    async def stop(self) -> None:
        self.handler = None

    async def send_text(self, chat_id: str, text: str) -> str | None:
        if self._fail_sends:
            self._fail_sends -= 1
            raise ConnectionError("delivery failed (injected)")
        async with self._changed:
            self.sent[chat_id].append(text)
            self._changed.notify_all()
        return str(len(self.sent[chat_id]))

    async def edit_text(self, chat_id: str, message_id: str, text: str) -> None:
        self.sent[chat_id][int(message_id) - 1] = text

    def open_stream(self, chat_id: str) -> ReplyStream | None:
        return _RecordingStream(self, chat_id) if self._streaming else None

    async def send_typing(self, chat_id: str) -> None:
        self.typing[chat_id] += 1

    async def download(self, file_id: str) -> bytes:
        if file_id not in self.files:
            raise FileUnavailable("no such file")
        return self.files[file_id]

    def message(self, chat_id: str, text: str, user_id: str = "1") -> InboundMessage:
        return InboundMessage(self.channel_type, chat_id, user_id, text)

    def document(self, chat_id: str, name: str, data: bytes, mime: str = "text/plain") -> InboundMessage:
        """A user sends the file `name` holding `data` (to fetch with `download`)."""
        file_id = f"file{len(self.files) + 1}"
        self.files[file_id] = data
        attachment = Attachment("document", file_id, mime, len(data), name)
        return InboundMessage(self.channel_type, chat_id, "1", "", attachment=attachment)

    async def wait_for(self, chat_id: str, count: int, timeout: float = WAIT_SECONDS) -> list[str]:
        """The first `count` replies to `chat_id`, waiting for them to arrive."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sent[chat_id]) >= count)
        return self.sent[chat_id][:count]


class _RecordingStream:
    """Keeps every update; the final text counts as the one message sent."""

    def __init__(self, channel: RecordingChannel, chat_id: str) -> None:
        self._channel = channel
        self._chat_id = chat_id
        self.finished = False

    async def update(self, text: str) -> None:
        self._channel.stream_updates[self._chat_id].append(text)

    async def finish(self, text: str) -> None:
        assert not self.finished, "a stream is finished once"
        self.finished = True
        await self._channel.send_text(self._chat_id, text)

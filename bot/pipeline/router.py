"""`InboundRouter`: where every inbound message goes: its chat's queue, then a command or the pipeline."""

from __future__ import annotations

import logging

from bot.channels.base import Channel
from bot.commands.registry import CommandRegistry
from bot.domain.inbound import InboundMessage
from bot.pipeline.dispatcher import ChatDispatcher
from bot.pipeline.runner import PipelineRunner

log = logging.getLogger(__name__)


class InboundRouter:
    """Takes messages from every channel and answers each in its chat's order."""

    def __init__(self, runner: PipelineRunner, commands: CommandRegistry) -> None:
        self._runner = runner
        self._commands = commands
        self.dispatcher = ChatDispatcher(self._handle)

    async def accept(self, inbound: InboundMessage, channel: Channel) -> None:
        """Queue the message for its chat and return at once."""
        if not self.dispatcher.submit(inbound, channel):
            log.warning("[Router] Shutting down; message for %s not taken", inbound.session_id)

    async def _handle(self, inbound: InboundMessage, channel: Channel) -> None:
        if self._commands.is_command(inbound.text):
            reply = await self._commands.execute(inbound, channel)
            await channel.send_text(inbound.chat_id, reply)
            return
        await self._runner.run(inbound, channel)

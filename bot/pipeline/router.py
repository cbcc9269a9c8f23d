"""`InboundRouter`: where every inbound message goes: its chat's queue, the access check, then a
command or the pipeline.

Commands marked immediate (`/stop`) skip the queue: they act on the run in progress.
"""

from __future__ import annotations

import logging

from bot.access.policy import AccessPolicy
from bot.channels.base import CHANNEL_NOTICE, Channel
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import InboundMessage
from bot.pipeline.dispatcher import ChatDispatcher
from bot.pipeline.runner import PipelineRunner

log = logging.getLogger(__name__)


class InboundRouter:
    """Takes messages from every channel and answers each in its chat's order."""

    def __init__(self, runner: PipelineRunner, commands: CommandRegistry, access: AccessPolicy | None = None) -> None:
        self._runner = runner
        self._commands = commands
        self._access = access
        self.dispatcher = ChatDispatcher(self._handle)
        commands.register(
            Command(
                "stop",
                "interrupt the answer in progress (queued messages are still answered)",
                self._stop,
                immediate=True,
            )
        )

    async def accept(self, inbound: InboundMessage, channel: Channel) -> None:
        """Queue the message for its chat and return at once."""
        if self._commands.is_immediate(inbound.text):
            if await self._admitted(inbound, channel):
                await self._answer_command(inbound, channel)
            return
        if not self.dispatcher.submit(inbound, channel):
            log.warning("[Router] Shutting down; message for %s not taken", inbound.session_id)

    def resume(self, inbound: InboundMessage, channel: Channel) -> None:
        """Queue a message already in the session (left unanswered by the last stop); no access check:
        its sender was admitted when it arrived."""
        self.dispatcher.submit(inbound, channel)

    async def _handle(self, inbound: InboundMessage, channel: Channel) -> None:
        if inbound.resumed:
            await self._runner.run(inbound, channel)
            return
        # Checked in the chat's queue, so a refusal keeps the chat's order; before anything is stored.
        if not await self._admitted(inbound, channel):
            return
        notice = inbound.extra.get(CHANNEL_NOTICE)
        if notice:
            await channel.send_text(inbound.chat_id, notice)
            return
        if self._commands.is_command(inbound.text):
            await self._answer_command(inbound, channel)
            return
        await self._runner.run(inbound, channel)

    async def _admitted(self, inbound: InboundMessage, channel: Channel) -> bool:
        """The access check; a refused sender gets the policy's reply (a pairing code) if it has one."""
        if self._access is None:
            return True
        decision = await self._access.check(inbound)
        if not decision.admitted and decision.reply:
            await channel.send_text(inbound.chat_id, decision.reply)
        return decision.admitted

    async def _answer_command(self, inbound: InboundMessage, channel: Channel) -> None:
        reply = await self._commands.execute(inbound, channel)
        await channel.send_text(inbound.chat_id, reply)

    async def _stop(self, request: CommandRequest) -> str:
        session_id = request.inbound.session_id
        if not self._runner.interrupt(session_id):
            return "Nothing is running."
        queued = self.dispatcher.pending(session_id)
        after = f" I'll answer the {queued} queued message(s) next." if queued else ""
        return "Stopped." + after

"""`InboundRouter`: where every inbound message goes: its chat's queue, the access check, then a
command, a document to read (`DocumentReader`), an image or recording to prepare (`MediaIntake`), or
the pipeline.

Each message becomes a turn of the turn ledger (`TurnLedger.receive`, recorded durably for a sender
who may talk) before it is queued, and the router passes the turn along: its handling ends with the
turn delivered (the runner's reply records that as soon as it went out). Every text for the chat goes
out through the turn's `TurnOutbound`; the channel itself is only handed to what needs the transport
(a file to download, a document's progress, /export's file).

Commands marked immediate (`/stop`) skip the queue: they act on the run in progress. An edit of a
message whose turn still waits in the queue replaces its text (`Turn.edited`); an edit of one already
begun is queued as a message of its own, which the runner records as a correction of the earlier one.
The photos of an album (sent at once, each a message of its own) join the turn of its first while it
waits (`Turn.joined`), and that turn waits `media.albumWaitSeconds` for them before it begins.
"""

from __future__ import annotations

import asyncio
import logging

from bot.access.policy import AccessPolicy
from bot.channels.base import Channel
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import InboundMessage
from bot.ledger.turns import Turn, TurnLedger
from bot.media.intake import MediaIntake
from bot.pipeline.dispatcher import ChatDispatcher
from bot.pipeline.outbound import Outbound, TurnOutbound
from bot.pipeline.runner import PipelineRunner
from bot.rag.uploads import DocumentReader
from bot.runtime_config import RuntimeConfigStore

log = logging.getLogger(__name__)


class InboundRouter:
    """Takes messages from every channel and answers each in its chat's order."""

    def __init__(
        self,
        runner: PipelineRunner,
        commands: CommandRegistry,
        access: AccessPolicy | None,
        ledger: TurnLedger,
        documents: DocumentReader | None = None,
        media: MediaIntake | None = None,
        config_store: RuntimeConfigStore | None = None,
        outbound: Outbound | None = None,
    ) -> None:
        self._runner = runner
        self._media = media
        self._config_store = config_store
        self._documents = documents
        self._commands = commands
        self._access = access
        self._ledger = ledger
        self._outbound = outbound or Outbound()
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
        """Make the message a turn (recorded for a sender who may talk), queue it for its chat, and return."""
        if inbound.edited:
            waiting = self._ledger.waiting(inbound.session_id, inbound.message_id)
            if waiting is not None:
                await waiting.edited(inbound.text)
                log.info(
                    "[Router] A queued message of %s was edited before its turn: answered as edited", inbound.session_id
                )
                return
        album = self._ledger.waiting_album(inbound)
        if album is not None:
            await album.joined(inbound)
            log.info("[Router] A photo of an album joined its first one in %s: answered together", inbound.session_id)
            return
        if inbound.may_be_command and self._commands.is_immediate(inbound.text):
            turn = Turn.unrecorded(inbound)
            outbound = self._outbound.for_turn(channel, turn)
            if await self._admitted(inbound, outbound):
                await self._answer_command(inbound, channel, outbound)
            return
        admitted = self._access is None or await self._access.admits(inbound)
        turn = await self._ledger.receive(inbound, record=admitted)
        if not self.dispatcher.submit(turn, channel):
            log.warning("[Router] Shutting down; message for %s not taken", inbound.session_id)

    def resume(self, turns: list[Turn], channels: list[Channel]) -> None:
        """Queue the turns the last stop left open (`TurnLedger.reopen`), each in its chat, in arrival order."""
        by_type = {channel.channel_type: channel for channel in channels}
        for turn in turns:
            self.dispatcher.submit(turn, by_type[turn.inbound.channel_type])

    async def answer_again(self, inbound: InboundMessage, question_id: str, channel: Channel) -> None:
        """Answer a stored question again (`/retry`, from within its chat's queue): a new turn of the ledger,
        so a crash before its new answer went out answers it after the restart."""
        turn = await self._ledger.retry(inbound, question_id)
        outbound = self._outbound.for_turn(channel, turn)
        async with turn.handled():
            await self._runner.run(turn.begin(), outbound)

    async def _handle(self, turn: Turn, channel: Channel) -> None:
        if turn.inbound.media_group is not None and not turn.begun_before and self._config_store is not None:
            # An album comes as one message per photo: the rest of it joins this turn while it waits.
            await asyncio.sleep((await self._config_store.current()).media.album_wait_seconds)
        inbound = turn.begin()
        outbound = self._outbound.for_turn(channel, turn)
        # A reply delivers the turn as it goes out; a notice, a command, a refusal end it here. /stop ends
        # it in the runner.
        async with turn.handled():
            if turn.begun_before:
                await self._runner.run(inbound, outbound)
            else:
                await self._handle_now(inbound, channel, outbound)

    async def _handle_now(self, inbound: InboundMessage, channel: Channel, outbound: TurnOutbound) -> None:
        # Checked in the chat's queue, so a refusal keeps the chat's order; before anything is stored.
        if not await self._admitted(inbound, outbound):
            return
        # A late message of a group that became a supergroup: its command, document or image acts on the
        # supergroup's data, once it moved (the turn's sends go there too: the channel redirects them).
        inbound = await self._runner.in_chat_now(inbound)
        if inbound.notice:
            await outbound.send(inbound.notice)
            return
        if inbound.attachment is not None and inbound.attachment.kind == "document":
            if self._documents is None:
                await outbound.send("I can't open files here.")
                return
            await self._documents.accept(inbound, channel)
            if not inbound.text.strip():
                return  # a caption, if any, is answered as a message of its own
        if MediaIntake.has_media(inbound):
            if self._media is None or self._config_store is None:
                await outbound.send("I can't take images or recordings here.")
                return
            config = await self._config_store.current()
            prepared = await self._media.prepare(inbound, channel, config.media, config.llm.model)
            for note in prepared.notes:
                await outbound.send(note)
            if prepared.inbound is None:
                return
            inbound = prepared.inbound
        if inbound.may_be_command and self._commands.is_command(inbound.text):
            await self._answer_command(inbound, channel, outbound)
            return
        await self._runner.run(inbound, outbound)

    async def _admitted(self, inbound: InboundMessage, outbound: TurnOutbound) -> bool:
        """The access check; a refused sender gets the policy's reply (a pairing code) if it has one."""
        if self._access is None:
            return True
        decision = await self._access.check(inbound)
        if not decision.admitted and decision.reply:
            await outbound.send(decision.reply)
        return decision.admitted

    async def _answer_command(self, inbound: InboundMessage, channel: Channel, outbound: TurnOutbound) -> None:
        reply = await self._commands.execute(inbound, channel)
        if reply:  # empty: the command answered by itself (/retry runs the pipeline, /export sends a file)
            await outbound.send(reply)

    async def _stop(self, request: CommandRequest) -> str:
        session_id = request.inbound.session_id
        if not self._runner.interrupt(session_id):
            return "Nothing is running."  # the run records its turn delivered as it stops
        queued = self.dispatcher.pending(session_id)
        after = f" I'll answer the {queued} queued message(s) next." if queued else ""
        return "Stopped." + after

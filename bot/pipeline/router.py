"""`InboundRouter`: where every inbound message goes: its chat's queue, the access check, then a
command, a document to read (`DocumentReader`), an image or recording to prepare (`MediaIntake`), or
the pipeline.

A message from someone who may talk is recorded received in the turn ledger before it is queued; its
handling ends with the turn delivered (the runner's reply records that as soon as it went out). Every
text for the chat goes out through the turn's `TurnOutbound`; the channel itself is only handed to
what needs the transport (a file to download, a document's progress, /export's file).

Commands marked immediate (`/stop`) skip the queue: they act on the run in progress. An edit of a
message still waiting in the queue replaces its text there, and in the ledger (so a crash before
its turn does not bring back the first text); an edit of one already taken is queued as a message of
its own, which the runner records as a correction of the earlier one.
"""

from __future__ import annotations

import dataclasses
import logging

from bot.access.policy import AccessPolicy
from bot.channels.base import CHANNEL_NOTICE, EDITED, FILE_ID, Channel
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import InboundMessage
from bot.ledger.turns import TurnLedger
from bot.media.intake import TRANSCRIBED, MediaIntake
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
        access: AccessPolicy | None = None,
        ledger: TurnLedger | None = None,
        documents: DocumentReader | None = None,
        media: MediaIntake | None = None,
        config_store: RuntimeConfigStore | None = None,
        outbound: Outbound | None = None,
    ) -> None:
        """`outbound` defaults to one that records in `ledger`."""
        self._runner = runner
        self._media = media
        self._config_store = config_store
        # Messages queued and not yet taken, by (session, channel message id), with their turn ids (None:
        # not in the ledger), and edits made to them meanwhile.
        self._queued: dict[tuple[str, str], str | None] = {}
        self._edits: dict[tuple[str, str], str] = {}
        self._documents = documents
        self._commands = commands
        self._access = access
        self._ledger = ledger
        self._outbound = outbound or Outbound(ledger)
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
        """Record the message received (a sender who may talk), queue it for its chat, and return."""
        key = (inbound.session_id, inbound.message_id or "")
        if inbound.extra.get(EDITED) and key in self._queued:
            await self._replace_queued_text(key, inbound.text)
            return
        if self._commands.is_immediate(inbound.text):
            outbound = self._outbound.for_turn(channel, inbound)
            if await self._admitted(inbound, outbound):
                await self._answer_command(inbound, channel, outbound)
            return
        if self._ledger is not None and (self._access is None or await self._access.admits(inbound)):
            try:
                inbound = await self._ledger.received(inbound)
            except OSError as error:
                # A full or read-only disk: answer anyway (the reply says memory was not saved).
                log.error("[Router] Could not record a message (%s); a crash before its answer would lose it", error)
        if not self.dispatcher.submit(inbound, channel):
            log.warning("[Router] Shutting down; message for %s not taken", inbound.session_id)
        elif inbound.message_id is not None and not inbound.extra.get(EDITED):
            self._queued[key] = inbound.journal_id

    def resubmit(self, inbound: InboundMessage, channel: Channel) -> None:
        """Queue a turn the last stop left open in the ledger, as it is."""
        if self.dispatcher.submit(inbound, channel) and inbound.message_id is not None and not inbound.resumed:
            # Still to be begun: an edit arriving before its turn replaces its text, as before the stop.
            self._queued[(inbound.session_id, inbound.message_id)] = inbound.journal_id

    async def answer_again(self, inbound: InboundMessage, channel: Channel) -> None:
        """Answer a stored message again (`/retry`, from within its chat's queue): a turn in the ledger
        again, so a crash before its new answer went out answers it after the restart."""
        if self._ledger is not None:
            try:
                inbound = await self._ledger.received(inbound)
            except OSError as error:
                log.error("[Router] Could not record /retry's turn (%s); a crash before it is answered loses it", error)
        outbound = self._outbound.for_turn(channel, inbound)
        async with outbound.settled_after():
            await self._runner.run(inbound, outbound)

    async def _replace_queued_text(self, key: tuple[str, str], text: str) -> None:
        """A queued message was edited before its turn: it is answered as edited (the first text never is)."""
        self._edits[key] = text
        turn_id = self._queued.get(key)
        if self._ledger is not None and turn_id is not None:
            try:
                await self._ledger.edited(turn_id, text)
            except OSError as error:
                log.error("[Router] Could not record an edit (%s); a crash before its turn would lose it", error)
        log.info("[Router] A queued message of %s was edited before its turn; the new text replaces it", key[0])

    async def _handle(self, inbound: InboundMessage, channel: Channel) -> None:
        key = (inbound.session_id, inbound.message_id or "")
        self._queued.pop(key, None)
        edited = self._edits.pop(key, None)
        if edited is not None:
            inbound = dataclasses.replace(inbound, text=edited)
        outbound = self._outbound.for_turn(channel, inbound)
        # A reply settles the turn as it goes out; a notice, a command, a refusal end it here. /stop ends
        # it in the runner.
        async with outbound.settled_after():
            await self._handle_now(inbound, channel, outbound)

    async def _handle_now(self, inbound: InboundMessage, channel: Channel, outbound: TurnOutbound) -> None:
        if inbound.resumed:
            await self._runner.run(inbound, outbound)
            return
        # Checked in the chat's queue, so a refusal keeps the chat's order; before anything is stored.
        if not await self._admitted(inbound, outbound):
            return
        notice = inbound.extra.get(CHANNEL_NOTICE)
        if notice:
            await outbound.send(notice)
            return
        if FILE_ID in inbound.extra:
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
        if self._commands.is_command(inbound.text) and not inbound.extra.get(TRANSCRIBED):
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

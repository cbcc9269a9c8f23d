"""`InboundRouter`: where every inbound message goes: its chat's queue, the access check, then a
command, a document to read (`DocumentReader`), an image or recording to prepare (`MediaIntake`), or
the pipeline.

Commands marked immediate (`/stop`) skip the queue: they act on the run in progress. An edit of a
message still waiting in the queue replaces its text there, and in the inbox journal (so a crash before
its turn does not bring back the first text); an edit of one already taken is queued as a message of
its own, which the runner records as a correction of the earlier one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from bot.access.policy import AccessPolicy
from bot.channels.base import CHANNEL_NOTICE, EDITED, FILE_ID, Channel
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import InboundMessage
from bot.media.intake import TRANSCRIBED, MediaIntake
from bot.pipeline.dispatcher import ChatDispatcher
from bot.pipeline.inbox import Inbox
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
        inbox: Inbox | None = None,
        documents: DocumentReader | None = None,
        media: MediaIntake | None = None,
        config_store: RuntimeConfigStore | None = None,
    ) -> None:
        self._runner = runner
        self._media = media
        self._config_store = config_store
        # Messages queued and not yet taken, by (session, channel message id), with their journal ids (None:
        # not journaled), and edits made to them meanwhile.
        self._queued: dict[tuple[str, str], str | None] = {}
        self._edits: dict[tuple[str, str], str] = {}
        self._documents = documents
        self._commands = commands
        self._access = access
        self._inbox = inbox
        # The journal entry each chat is handling now, so /stop can settle it.
        self._handling: dict[str, str] = {}
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
        """Journal the message (a sender who may talk), queue it for its chat, and return."""
        key = (inbound.session_id, inbound.message_id or "")
        if inbound.extra.get(EDITED) and key in self._queued:
            await self._replace_queued_text(key, inbound.text)
            return
        if self._commands.is_immediate(inbound.text):
            if await self._admitted(inbound, channel):
                await self._answer_command(inbound, channel)
            return
        if self._inbox is not None and (self._access is None or await self._access.admits(inbound)):
            try:
                recorded = await self._inbox.record(inbound)
            except OSError as error:
                # A full or read-only disk: answer anyway (the reply says memory was not saved).
                log.error("[Router] Could not journal a message (%s); a crash before its answer would lose it", error)
            else:
                if recorded is None:
                    log.info("[Router] Message %s was taken before the last stop already", inbound.dedup_key)
                    return
                inbound = recorded
        if not self.dispatcher.submit(inbound, channel):
            log.warning("[Router] Shutting down; message for %s not taken", inbound.session_id)
        elif inbound.message_id is not None and not inbound.extra.get(EDITED):
            self._queued[key] = inbound.journal_id

    def resubmit(self, inbound: InboundMessage, channel: Channel) -> None:
        """Queue a message the last stop left unhandled (from the journal or the session), as it is."""
        if self.dispatcher.submit(inbound, channel) and inbound.message_id is not None and not inbound.resumed:
            # Still to be begun: an edit arriving before its turn replaces its text, as before the stop.
            self._queued[(inbound.session_id, inbound.message_id)] = inbound.journal_id

    async def _replace_queued_text(self, key: tuple[str, str], text: str) -> None:
        """A queued message was edited before its turn: it is answered as edited (the first text never is)."""
        self._edits[key] = text
        journal_id = self._queued.get(key)
        if self._inbox is not None and journal_id is not None:
            try:
                await self._inbox.record_edit(journal_id, text)
            except OSError as error:
                log.error("[Router] Could not journal an edit (%s); a crash before its turn would lose it", error)
        log.info("[Router] A queued message of %s was edited before its turn; the new text replaces it", key[0])

    async def _handle(self, inbound: InboundMessage, channel: Channel) -> None:
        key = (inbound.session_id, inbound.message_id or "")
        self._queued.pop(key, None)
        edited = self._edits.pop(key, None)
        if edited is not None:
            inbound = dataclasses.replace(inbound, text=edited)
        journal_id = inbound.journal_id
        if journal_id is not None:
            self._handling[inbound.session_id] = journal_id
        settled = False

        async def settle() -> None:
            # Once: as soon as the runner has delivered the reply (a crash after that must not answer the
            # message again), or when handling ends, whichever comes first.
            nonlocal settled
            if not settled:
                settled = True
                await self._settle(journal_id)

        try:
            await self._handle_now(inbound, channel, settle)
        except asyncio.CancelledError:
            raise  # a shutdown cut it short: it stays in the journal and is handled after the restart
        except Exception:
            await settle()  # failed for good: replaying it would fail again
            raise
        else:
            await settle()
        finally:
            self._handling.pop(inbound.session_id, None)

    async def _settle(self, journal_id: str | None) -> None:
        if self._inbox is None or journal_id is None:
            return
        try:
            await self._inbox.done(journal_id)
        except OSError as error:
            log.error("[Router] Could not mark a message handled (%s); it may be answered again", error)

    async def _handle_now(
        self, inbound: InboundMessage, channel: Channel, on_delivered: Callable[[], Awaitable[None]]
    ) -> None:
        if inbound.resumed:
            await self._runner.run(inbound, channel, on_delivered)
            return
        # Checked in the chat's queue, so a refusal keeps the chat's order; before anything is stored.
        if not await self._admitted(inbound, channel):
            return
        notice = inbound.extra.get(CHANNEL_NOTICE)
        if notice:
            await channel.send_text(inbound.chat_id, notice)
            return
        if FILE_ID in inbound.extra:
            if self._documents is None:
                await channel.send_text(inbound.chat_id, "I can't open files here.")
                return
            await self._documents.accept(inbound, channel)
            if not inbound.text.strip():
                return  # a caption, if any, is answered as a message of its own
        if MediaIntake.has_media(inbound):
            if self._media is None or self._config_store is None:
                await channel.send_text(inbound.chat_id, "I can't take images or recordings here.")
                return
            config = await self._config_store.current()
            prepared = await self._media.prepare(inbound, channel, config.media, config.llm.model)
            for note in prepared.notes:
                await channel.send_text(inbound.chat_id, note)
            if prepared.inbound is None:
                return
            inbound = prepared.inbound
        if self._commands.is_command(inbound.text) and not inbound.extra.get(TRANSCRIBED):
            await self._answer_command(inbound, channel)
            return
        await self._runner.run(inbound, channel, on_delivered)

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
        if reply:  # empty: the command answered by itself (/retry runs the pipeline, /export sends a file)
            await channel.send_text(inbound.chat_id, reply)

    async def _stop(self, request: CommandRequest) -> str:
        session_id = request.inbound.session_id
        if not self._runner.interrupt(session_id):
            return "Nothing is running."
        await self._settle(self._handling.get(session_id))
        queued = self.dispatcher.pending(session_id)
        after = f" I'll answer the {queued} queued message(s) next." if queued else ""
        return "Stopped." + after

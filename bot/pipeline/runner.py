"""`PipelineRunner`: runs the numbered systems for one turn; its reply goes out through `TurnOutbound`.

The turn (`bot.ledger.turns.Turn`) decides what is sent: a reopened turn's `resume` gives the reply to
send as it is, without a model call, and a turn whose question the session holds is answered from it.
Otherwise the user's message joins the session before any system runs; a turn the ledger holds writes
it with its answer, or with the failure that ends it, in one save (a crash before that leaves the turn
open, and the next start answers it); an unrecorded one writes it at once. Systems before the reply
(18, 20, 30) may end the turn with a user-facing error, which is then its reply; systems after it (50,
55) only log their failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence

from bot.domain.inbound import InboundMessage
from bot.domain.message import Message, Role, Sender, new_message_id
from bot.domain.session import AgentSession
from bot.domain.session_metadata import SessionMetadata
from bot.ledger.turns import stored_answer
from bot.llm.errors import LlmError
from bot.metrics import BotMetrics
from bot.pipeline.outbound import TurnOutbound
from bot.pipeline.system import PipelineSystem, UserFacingError
from bot.pipeline.traces import TurnTraces
from bot.pipeline.turn import TurnContext
from bot.pipeline.turn_storage import store_turn_messages
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionPersistError, SessionService
from bot.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

# The systems of the design, by order; a build without one of them says so once at start.
DESIGNED_SYSTEMS = {
    18: "AutoCompaction",
    20: "ContextBuilding",
    30: "ToolLoop",
    50: "MemoryPersist",
    55: "RagIndexing",
}

GENERIC_FAILURE_REPLY = "Something went wrong while answering. Your message is saved; please try again."
STORAGE_PROBLEM_NOTE = (
    "(I could not save this conversation to disk: {problem}. I keep it in memory and write it as soon as I can.)"
)


class PipelineRunner:
    """Runs every inbound message of a chat through the systems, in order."""

    def __init__(
        self,
        systems: Sequence[PipelineSystem],
        sessions: SessionService,
        config_store: RuntimeConfigStore,
        metrics: BotMetrics | None = None,
        tools: ToolRegistry | None = None,
        traces: TurnTraces | None = None,
    ) -> None:
        self._metrics = metrics or BotMetrics()
        self._traces = traces
        self._tools = tools
        self._systems = sorted(systems, key=lambda system: system.order)
        self._sessions = sessions
        self._config_store = config_store
        self._interruptible_runs: dict[str, asyncio.Task[object]] = {}
        self._stopped_by_user: set[str] = set()
        present = {system.order for system in self._systems}
        for order, name in DESIGNED_SYSTEMS.items():
            if order not in present:
                log.info("[Pipeline] %s (%d) is not part of this build; skipped", name, order)
        log.info("[Pipeline] Systems: %s", ", ".join(f"{s.name}({s.order})" for s in self._systems))

    @property
    def systems(self) -> list[PipelineSystem]:
        return list(self._systems)

    def interrupt(self, session_id: str) -> bool:
        """Cancel a chat's run if it has not replied yet (`/stop`); False when there is none.

        Only the part before the reply can be interrupted: once the reply is out, memory and RAG
        writes for it always complete.
        """
        task = self._interruptible_runs.get(session_id)
        if task is None or task.done():
            return False
        self._stopped_by_user.add(session_id)
        task.cancel()
        return True

    @contextlib.asynccontextmanager
    async def _interruptible(self, ctx: TurnContext, outbound: TurnOutbound) -> AsyncIterator[None]:
        session_id = ctx.session.id
        task = asyncio.current_task()
        assert task is not None
        self._interruptible_runs[session_id] = task
        try:
            yield
        except asyncio.CancelledError:
            # Stopped by the user: the turn ends here, not to be answered after a restart. Cancelled by
            # a shutdown: left open on purpose, so the next start answers it.
            if session_id in self._stopped_by_user:
                await asyncio.shield(self._end_without_reply(ctx, outbound))
            raise
        finally:
            self._interruptible_runs.pop(session_id, None)
            self._stopped_by_user.discard(session_id)

    async def _end_without_reply(self, ctx: TurnContext, outbound: TurnOutbound) -> None:
        await self._write_question(ctx)
        await outbound.turn.delivered()

    async def _write_question(self, ctx: TurnContext) -> None:
        """Save the session, so a turn that ends without an answer still has its question written."""
        try:
            await self._sessions.save(ctx.session)
        except SessionPersistError as error:
            ctx.storage_problem = str(error)

    async def in_chat_now(self, inbound: InboundMessage) -> InboundMessage:
        """`inbound` as a message of its chat as it is now: of the chat it moved to (a group's late message once
        the group became a supergroup), after a move of it under way has ended. What is done with the message
        outside a run (a command, a document to read, an image kept) then acts on the chat's data where it is,
        as a run does (`SessionService.held`)."""
        try:
            chat_id = await self._sessions.chat_id_now(inbound.channel_type, inbound.chat_id)
        except OSError as error:  # the database not answering among them: the message is handled where it came
            log.warning("[Pipeline] Could not read where %s is now (%s); taken as it came", inbound.session_id, error)
            return inbound
        return inbound if chat_id == inbound.chat_id else dataclasses.replace(inbound, chat_id=chat_id)

    async def run(self, inbound: InboundMessage, outbound: TurnOutbound) -> TurnContext | None:
        """Answer `inbound`, the message of `outbound.turn` as prepared for the model, sending everything
        through `outbound`. The caller guarantees one run per chat at a time.

        The reply is recorded delivered as soon as it went out, before memory and RAG are written (the
        shorter that gap, the rarer an answer sent twice after a crash).
        """
        started = time.monotonic()
        turn = outbound.turn
        self._metrics.messages_in.labels(inbound.channel_type).inc()
        config = await self._config_store.current()
        async with self._sessions.held(inbound.channel_type, inbound.chat_id) as session:
            await self._tell_about_recovery(session.metadata, outbound)
            if turn.settled:
                return None  # delivered meanwhile (a /retry answered it again)
            answer = turn.resume(session)
            if answer is not None:
                # Answered before the stop, its delivery unknown: sent as it is, the model not asked again.
                await outbound.resend(answer)
                return None
            pending = turn.stored_question(session)
            ctx = TurnContext(
                inbound=inbound,
                session=session,
                config=config,
                user_message=pending or user_message_for(inbound, session, turn.id),
                model=config.llm.model,
                reply_stream=outbound.open_stream() if config.tool_loop.streaming else None,
            )
            if inbound.is_group:
                session.metadata.is_group = True
            if pending is not None:
                log.info("[Pipeline] Answering %s's message left unanswered by the last stop", session.id)
            elif turn.recorded:
                self._sessions.add_unwritten(session, [ctx.user_message])
            else:
                await store_turn_messages(self._sessions, ctx, [ctx.user_message])
            async with outbound.typing(), self._interruptible(ctx, outbound):
                if self._tools is not None:
                    # A server just added may still be starting: its tools belong to this message's plan too.
                    await self._tools.wait_for_sources(config.mcp.ready_wait_seconds)
                failure_reply = await self._run_systems(ctx, after_reply=False)
            if failure_reply is not None or self._sessions.has_unwritten(session):
                # A failure ends the turn with its question written; a build without the tool loop stored
                # no answer, and the question still gets written.
                await self._write_question(ctx)
            await self._deliver(ctx, outbound, failure_reply)
            if failure_reply is None:
                if self._traces is not None:
                    # Everything the reply was made of is known by now, and the reply is out.
                    self._traces.record(ctx, time.monotonic() - started)
                await self._run_systems(ctx, after_reply=True)
        log.info("[Pipeline] %s answered in %.0f ms", session.id, (time.monotonic() - started) * 1000)
        return ctx

    async def _run_systems(self, ctx: TurnContext, *, after_reply: bool) -> str | None:
        """Run one phase; returns the reply to send instead when a pre-reply system failed."""
        for system in self._systems:
            if system.after_reply != after_reply or not system.enabled(ctx):
                continue
            try:
                with self._metrics.stage_seconds.labels(system.name).time():
                    await system.process(ctx)
            except asyncio.CancelledError:
                raise
            except (UserFacingError, LlmError) as error:
                if after_reply:
                    log.warning("[%s] Failed after the reply: %s", system.name, error)
                    continue
                return error.user_message
            except Exception:
                log.exception("[%s] Failed", system.name)
                self._metrics.errors.labels(f"system_{system.name}").inc()
                if not after_reply:
                    return GENERIC_FAILURE_REPLY
        return None

    async def _deliver(self, ctx: TurnContext, outbound: TurnOutbound, failure_reply: str | None) -> None:
        text = failure_reply if failure_reply is not None else ctx.reply_text
        if failure_reply is None and text and ctx.reply_note:
            text = f"{ctx.reply_note}\n\n{text}"
        problem = ctx.storage_problem
        footnote = STORAGE_PROBLEM_NOTE.format(problem=problem) if problem is not None else None
        await outbound.reply(text, footnote, failed=failure_reply is not None, stored=self._answer_stored(ctx, text))

    def _answer_stored(self, ctx: TurnContext, text: str | None) -> bool:
        """Whether the session on disk holds `text` as the turn's answer: what a restart would send."""
        if text is None or ctx.storage_problem is not None or self._sessions.has_unwritten(ctx.session):
            return False
        stored = stored_answer(ctx.session, ctx.user_message.id)
        return stored is not None and stored.content == text

    async def _tell_about_recovery(self, metadata: SessionMetadata, outbound: TurnOutbound) -> None:
        quarantined = metadata.recovered_from
        if quarantined:
            metadata.recovered_from = None
            await outbound.send(
                f"Your previous conversation file was damaged, so I started a fresh one. "
                f"The damaged file was kept as {quarantined}; your memory files are untouched."
            )


def user_message_for(inbound: InboundMessage, session: AgentSession, message_id: str | None = None) -> Message:
    """The session's user message for `inbound` (its id `message_id`, the turn's, when it has one): its text,
    sender, quoted reply, the author of a forwarded message, images (its own, or those of an earlier photo
    it replies to) and, for an edit of a message already answered, which stored message it corrects."""
    sender = Sender(id=inbound.user_id, name=inbound.display_name) if inbound.sender_name or inbound.username else None
    image = inbound.image
    media = [image.model_copy(update={"caption": inbound.text or None})] if image is not None else None
    if media is not None and inbound.album_images:
        media += inbound.album_images
    if media is None and inbound.reply_to is not None:
        # A question about an earlier photo, asked by replying to it: the photo comes with it again (the same
        # file), so the model sees what is asked about, however many images came since.
        replied = _stored_user_message(session, inbound.reply_to)
        if replied is not None and replied.media:
            media = [item.model_copy(update={"caption": None}) for item in replied.media]
    correction_of = None
    if inbound.edited and inbound.message_id is not None:
        earlier = _stored_user_message(session, inbound.message_id)
        correction_of = earlier.id if earlier is not None else None
    return Message(
        id=message_id or new_message_id(),
        role=Role.USER,
        content=inbound.text,
        sender=sender,
        quote=inbound.quote,
        forwarded_from=inbound.forwarded_from,
        media=media,
        correction_of=correction_of,
        channel_message_id=inbound.message_id,
    )


def _stored_user_message(session: AgentSession, channel_message_id: str) -> Message | None:
    """The session's user message the channel knows by `channel_message_id`, the newest first."""
    return next(
        (
            stored
            for stored in reversed(session.messages)
            if stored.role is Role.USER and stored.channel_message_id == channel_message_id
        ),
        None,
    )

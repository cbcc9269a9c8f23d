"""ToolLoopExecutionSystem (30): the model answers the turn, calling tools as often as it needs.

Each round: close tool calls left without a result, prune old tool output from what is sent, call
the model with the tool schemas (showing the text on the turn's reply stream as it comes), store the
assistant's message, run the requested tools concurrently and store their results, and go again
until the model answers without tools or `toolLoop.maxIterations` is reached. Every message is in
the session before the next step, so a crash or `/stop` loses nothing that happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.compaction.recovery import with_payload_recovery
from bot.compaction.service import CompactionService
from bot.domain.conversation import Incremental
from bot.domain.message import Message, Role, ToolCall
from bot.llm.client import ChatRequest, ChatResult, LlmClient, TextDelta
from bot.llm.errors import LlmError, LlmFailure
from bot.llm.wire import WireForms
from bot.media.intake import NO_VISION_NOTE, VisionSupport
from bot.media.prompt import images_for_prompt
from bot.media.store import MediaStore
from bot.pipeline.system import PipelineSystem, UserFacingError
from bot.pipeline.turn import TurnContext
from bot.pipeline.turn_storage import is_group_chat, store_turn_messages
from bot.sessions.service import SessionPersistError, SessionService
from bot.tools.eviction import evict_if_large
from bot.tools.orphans import close_orphaned_tool_calls
from bot.tools.output_pruning import prune_tool_results
from bot.tools.registry import MAX_NAME_CHARS, ToolContext, ToolRegistry, clip

log = logging.getLogger(__name__)

EMPTY_ANSWER_REPLY = "The model sent an empty answer. Please try again or rephrase."


def iteration_cap_reply(iterations: int) -> str:
    return (
        f"I stopped after {iterations} rounds of tool calls without reaching an answer. "
        "Tell me to continue if you want me to keep going."
    )


class ToolLoopExecutionSystem(PipelineSystem):
    order = 30
    name = "ToolLoop"

    def __init__(
        self,
        llm: LlmClient,
        sessions: SessionService,
        tools: ToolRegistry,
        workspace_root: Path,
        compaction: CompactionService | None = None,
        media: MediaStore | None = None,
        vision: VisionSupport | None = None,
        rebuild_context: Callable[[TurnContext], Awaitable[None]] | None = None,
    ) -> None:
        self._media = media
        # Builds the turn's prompt parts again (ContextBuilding's): after a refusal taught a smaller window.
        self._rebuild_context = rebuild_context
        self._vision = vision or VisionSupport()
        self._llm = llm
        self._sessions = sessions
        self._tools = tools
        self._workspace_root = workspace_root
        self._compaction = compaction
        # What each model call needs of the whole conversation, kept as a chat grows (`Incremental`).
        self._wire = WireForms()
        self._shapes: Incremental[_Shape] = Incremental(_Shape, _shaped)

    async def process(self, ctx: TurnContext) -> None:
        loop_config = ctx.config.tool_loop
        tool_context = ToolContext(
            ctx.session.id, ctx.session.channel_type, ctx.session.chat_id, ctx.config, ctx.turn_id
        )
        for _ in range(loop_config.max_iterations):
            await self._close_orphans(ctx)
            result = await self._ask_model(ctx)
            if not result.tool_calls:
                await self._finish(ctx, result)
                return
            calls = Message.assistant(result.text, tool_calls=result.tool_calls)
            await self._store(ctx, [calls])
            names = ", ".join(clip(call.name, MAX_NAME_CHARS) for call in result.tool_calls)
            log.info("[ToolLoop] turn %s: %s asked for %s", ctx.turn_id, ctx.model, names)
            outputs = await asyncio.gather(*(self._run_tool(call, tool_context) for call in result.tool_calls))
            await self._store(
                ctx,
                [Message.tool_result(call, output) for call, output in zip(result.tool_calls, outputs, strict=True)],
            )
        log.warning("[ToolLoop] %s reached the cap of %d iterations", ctx.session.id, loop_config.max_iterations)
        await self._finish(ctx, ChatResult(iteration_cap_reply(loop_config.max_iterations)))

    async def _ask_model(self, ctx: TurnContext) -> ChatResult:
        config = ctx.config

        group = is_group_chat(ctx)
        # The estimate of the request last sent, for the payload-too-large recovery.
        sent_tokens = [0]

        async def call() -> ChatResult:
            try:
                return await call_with(await self._images(ctx))
            except LlmError as error:
                if error.failure is not LlmFailure.BAD_REQUEST or not _about_images(error.detail):
                    raise
                if not await self._images(ctx):
                    raise
                # The endpoint refused the images: answer from their text stand-ins, and say so once.
                self._vision.mark_blind(ctx.model)
                if self._vision.first_telling(ctx.session.id, ctx.model):
                    ctx.reply_note = NO_VISION_NOTE.format(model=ctx.model)
                return await call_with({})

        async def call_with(images: dict[str, list[str]]) -> ChatResult:
            # Built from the session on every try: after a payload-too-large refusal it was compacted.
            messages = ctx.session.messages
            if self._shapes.over(messages).tool_results:
                messages = prune_tool_results(messages, config.tool_loop)
            wire = self._wire.messages(ctx.system_prompt, messages, images, group=group, turn_prompt=ctx.turn_prompt)
            # The tools the plan has room for (after a window was learned, perhaps fewer than before).
            tools = self._offered_tools(ctx) or None
            if self._compaction is not None:
                sent_tokens[0] = self._compaction.planner.estimator.request(ctx.model, wire.size, tools)
            request = ChatRequest(
                model=ctx.model,
                messages=wire.messages,
                messages_json=wire.jsons,
                tools=tools,
                temperature=config.llm.temperature,
                timeout_seconds=config.llm.request_timeout_seconds,
                max_retries=config.llm.max_retries,
                purpose="reply",
            )
            if ctx.reply_stream is not None and config.tool_loop.streaming:
                result = await self._stream(ctx, request)
            else:
                result = await self._llm.complete(request)
            if result.usage is not None and self._compaction is not None:
                # Calibrates the estimate; a prompt the endpoint cut silently teaches its window instead,
                # which the next message is planned for.
                self._compaction.planner.observe_usage(
                    ctx.model,
                    ctx.session.id,
                    wire.size,
                    tools,
                    result.usage.prompt_tokens,
                    config.compaction.silent_cut_ratio,
                )
            return result

        if self._compaction is None:
            result = await call()
        else:
            attempts = config.compaction.recovery_attempts
            refit = functools.partial(self._rebuild_context, ctx) if self._rebuild_context is not None else None
            result = await with_payload_recovery(
                self._compaction, ctx.session, ctx.model, attempts, call, refit, lambda: sent_tokens[0]
            )
        if result.usage is not None:
            ctx.usages.append(result.usage)
            ctx.session.metadata.last_usage = result.usage.to_json_dict()
        return result

    def _offered_tools(self, ctx: TurnContext) -> list[dict[str, Any]]:
        if self._compaction is None:
            return self._tools.schemas()
        return self._compaction.planner.offered_tools(ctx.model, ctx.config)

    async def _images(self, ctx: TurnContext) -> dict[str, list[str]]:
        """The data URLs of the images this call carries (the image budget), none when the model is blind."""
        media = ctx.config.media
        if self._media is None or not self._vision.sees(ctx.model, media):
            return {}
        with_media = self._shapes.over(ctx.session.messages).with_media
        return await images_for_prompt(with_media, self._media, media.images_in_prompt)

    async def _stream(self, ctx: TurnContext, request: ChatRequest) -> ChatResult:
        assert ctx.reply_stream is not None
        text = ""
        # Closed here on the return, not left to the event loop's finalizer hook for unfinished async
        # generators (a thread-safe wake-up and a task of its own, every message).
        async with contextlib.aclosing(self._llm.stream(request)) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    text += event.text
                    await ctx.reply_stream.update(text)
                else:
                    return event
        raise UserFacingError("The model's answer ended early. Please try again.")

    async def _run_tool(self, call: ToolCall, tool_context: ToolContext) -> str:
        loop_config = tool_context.config.tool_loop
        try:
            outcome = await asyncio.wait_for(self._tools.execute(call, tool_context), loop_config.tool_timeout_seconds)
            content = outcome.content
        except TimeoutError:
            log.warning(
                "[ToolLoop] turn %s: %s timed out after %.0f s",
                tool_context.turn_id, call.name, loop_config.tool_timeout_seconds,
            )  # fmt: skip
            content = f"Error: {call.name} did not finish within {loop_config.tool_timeout_seconds:.0f} seconds."
        return await evict_if_large(
            content,
            call.id,
            tool_context.session_id,
            self._workspace_root,
            loop_config.eviction_chars,
            loop_config.eviction_preview_lines,
        )

    async def _finish(self, ctx: TurnContext, result: ChatResult) -> None:
        if not result.text.strip():
            log.warning("[ToolLoop] %s answered with no text (finish reason %s)", ctx.model, result.finish_reason)
            raise UserFacingError(EMPTY_ANSWER_REPLY)
        await self._store(ctx, [Message.assistant(result.text)])
        ctx.reply_text = result.text  # the outbound step sends it (finishing the stream that showed it)

    async def _store(self, ctx: TurnContext, messages: list[Message]) -> None:
        await store_turn_messages(self._sessions, ctx, messages)
        ctx.new_messages.extend(messages)

    async def _close_orphans(self, ctx: TurnContext) -> None:
        if not self._shapes.over(ctx.session.messages).unanswered:
            return  # every tool call has its result (most chats never call a tool)
        patched, added = close_orphaned_tool_calls(ctx.session.messages)
        if added:
            log.info("[ToolLoop] Closed %d interrupted tool calls in %s", len(added), ctx.session.id)
            try:
                await self._sessions.replace_messages(ctx.session, patched, new=added)
            except SessionPersistError as error:
                ctx.storage_problem = str(error)


def _about_images(detail: str) -> bool:
    """Whether a 400 from the endpoint is about the images sent (a model without vision)."""
    lowered = detail.lower()
    return any(word in lowered for word in ("image", "vision", "multimodal", "content type"))


@dataclass
class _Shape:
    """What the tool loop asks of the whole conversation before each model call: the tool calls still
    without a result, whether any tool result is there to prune, the user messages with media."""

    unanswered: set[str] = field(default_factory=set)
    tool_results: bool = False
    with_media: list[Message] = field(default_factory=list)


def _shaped(shape: _Shape, message: Message) -> _Shape:
    if message.tool_calls:
        shape.unanswered.update(call.id for call in message.tool_calls)
    if message.role is Role.TOOL:
        shape.tool_results = True
        shape.unanswered.discard(message.tool_call_id or "")
    if message.role is Role.USER and message.media:
        shape.with_media.append(message)
    return shape

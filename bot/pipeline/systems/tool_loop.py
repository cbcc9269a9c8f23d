"""ToolLoopExecutionSystem (30): asks the model for the answer to the turn.

It sends the system prompt built at 20 and the session's messages, records the usage the provider
reports, and stores the assistant's message in the session before the reply is delivered, so a
failed delivery loses nothing.
"""

from __future__ import annotations

import logging

from bot.domain.message import Message
from bot.domain.turn import TurnContext
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.wire import to_openai_messages
from bot.pipeline.system import PipelineSystem, UserFacingError
from bot.sessions.service import SessionService
from bot.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

EMPTY_ANSWER_REPLY = "The model sent an empty answer. Please try again or rephrase."


class ToolLoopExecutionSystem(PipelineSystem):
    order = 30
    name = "ToolLoop"

    def __init__(self, llm: LlmClient, sessions: SessionService, tools: ToolRegistry) -> None:
        self._llm = llm
        self._sessions = sessions
        self._tools = tools

    async def process(self, ctx: TurnContext) -> None:
        llm_config = ctx.config.llm
        request = ChatRequest(
            model=ctx.model,
            messages=to_openai_messages(ctx.system_prompt, ctx.session.messages),
            temperature=llm_config.temperature,
            timeout_seconds=llm_config.request_timeout_seconds,
            max_retries=llm_config.max_retries,
        )
        result = await self._llm.complete(request)
        if result.usage is not None:
            ctx.usages.append(result.usage)
            ctx.session.metadata["lastUsage"] = result.usage.to_json_dict()
        if not result.text.strip():
            log.warning("[ToolLoop] %s answered with no text (finish reason %s)", ctx.model, result.finish_reason)
            raise UserFacingError(EMPTY_ANSWER_REPLY)
        answer = Message.assistant(result.text)
        await self._sessions.append_messages(ctx.session, [answer])
        ctx.new_messages.append(answer)
        ctx.reply_text = result.text

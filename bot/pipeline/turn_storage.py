"""Writing a turn's messages to its session, the same way for the runner and every system."""

from __future__ import annotations

from bot.domain.message import Message
from bot.pipeline.turn import TurnContext
from bot.sessions.service import SessionPersistError, SessionService


async def store_turn_messages(sessions: SessionService, ctx: TurnContext, messages: list[Message]) -> None:
    """Persist messages of the turn; a disk failure is noted on the turn instead of ending it."""
    try:
        await sessions.append_messages(ctx.session, messages)
    except SessionPersistError as error:
        ctx.storage_problem = str(error)


def is_group_chat(ctx: TurnContext) -> bool:
    """Whether the turn is in a group: this message says so, or an earlier one of the chat did."""
    return ctx.inbound.is_group or ctx.session.metadata.is_group

"""Writing a turn's messages to its session, the same way for the runner and every system."""

from __future__ import annotations

from bot.domain.message import Message, Role
from bot.domain.session import AgentSession
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


def stored_question(session: AgentSession, turn_id: str | None) -> Message | None:
    """The user message of a turn, if the session holds it (its id is the turn's id in the ledger)."""
    if turn_id is None:
        return None
    return next((m for m in reversed(session.messages) if m.role is Role.USER and m.id == turn_id), None)


def stored_answer(session: AgentSession, user_message_id: str) -> Message | None:
    """The final answer stored for a user message: its last assistant text before the next user message."""
    messages = session.messages
    # Looked for from the end: the turn asked about is nearly always the newest one.
    start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id == user_message_id), None)
    if start is None:
        return None
    answer = None
    for message in messages[start + 1 :]:
        if message.role is Role.USER:
            break
        if message.role is Role.ASSISTANT and message.content and not message.tool_calls:
            answer = message
    return answer

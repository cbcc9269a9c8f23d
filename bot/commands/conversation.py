"""`/retry`, `/undo` and `/export`: what people expect to do with the conversation itself.

- `/retry` answers the last message again: the answer (and its tool calls) leave the session and the
  pipeline runs once more, as a new turn of the ledger, for the same message, which is not stored twice.
- `/undo` drops the last exchange (the last message and everything after it) from the session; the
  archive keeps every message, as it always does.
- In a group both act on the sender's own last exchange only, when it is the chat's last one.
- Both take back what memory recorded of the dropped exchange (`ForgetExchange`: its daily-note line,
  its memory items, its knowledge-graph document), so a discarded answer does not linger there.
- `/export` sends the conversation so far as a Markdown file (as text where the channel cannot send files).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bot.channels.base import Channel
from bot.clock import Clock
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.inbound import InboundMessage
from bot.domain.message import Message, Role, forwarded_note
from bot.domain.session import AgentSession
from bot.sessions.service import SessionService

log = logging.getLogger(__name__)

# Answers a question the session holds (its text as `InboundMessage`, its message id) again, as a new turn.
AnswerAgain = Callable[[InboundMessage, str, Channel], Awaitable[object]]
# Takes back from memory what was recorded of an exchange dropped from the session (its messages).
ForgetExchange = Callable[[AgentSession, list[Message]], Awaitable[None]]
# A tool result is cut to this many characters in an export.
EXPORT_TOOL_CHARS = 500


def last_user_index(messages: list[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role is Role.USER:
            return index
    return None


def someone_elses(message: Message, inbound: InboundMessage) -> str | None:
    """In a group, the name of the person who wrote `message` when it is not the command's sender: /retry
    and /undo act on a person's own last exchange, never on another member's."""
    if not inbound.is_group or message.sender is None or message.sender.id == inbound.user_id:
        return None
    return message.sender.name


def register_conversation_commands(
    registry: CommandRegistry,
    sessions: SessionService,
    answer_again: AnswerAgain,
    forget_exchange: ForgetExchange,
    clock: Clock,
) -> None:
    async def take_back_last_exchange(
        inbound: InboundMessage, keep_question: bool, nothing: str, not_yours: str
    ) -> list[Message] | str:
        """Drop the sender's last exchange from the conversation (its question too unless `keep_question`)
        and take back what was written of it; the exchange dropped, or why there is none to drop (in a
        group only the sender's own: `not_yours` names whose it is)."""
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        async with sessions.lock_for(session.id):
            index = last_user_index(session.messages)
            if index is None:
                return nothing
            if (author := someone_elses(session.messages[index], inbound)) is not None:
                return not_yours.format(author=author)
            exchange = session.messages[index:]
            await sessions.replace_messages(session, session.messages[: index + 1 if keep_question else index])
        await forget_exchange(session, exchange)
        return exchange

    async def retry(request: CommandRequest) -> str:
        inbound = request.inbound
        exchange = await take_back_last_exchange(
            inbound,
            keep_question=True,
            nothing="There is no message of yours to answer again.",
            not_yours="The last message here is {author}'s; /retry answers again only your own last message.",
        )
        if isinstance(exchange, str):
            return exchange
        log.info(
            "[Session] /retry in %s: %d messages of the last answer dropped", inbound.session_id, len(exchange) - 1
        )
        last = exchange[0]
        again = InboundMessage(
            inbound.channel_type, inbound.chat_id, inbound.user_id, last.content, username=inbound.username,
            sender_name=inbound.sender_name, is_group=inbound.is_group,
        )  # fmt: skip
        await answer_again(again, last.id, request.channel)
        return ""  # the answer itself is the reply

    async def undo(request: CommandRequest) -> str:
        removed = await take_back_last_exchange(
            request.inbound,
            keep_question=False,
            nothing="There is nothing to undo.",
            not_yours="The last message here is {author}'s; /undo drops only your own last exchange.",
        )
        if isinstance(removed, str):
            return removed
        log.info("[Session] /undo in %s: %d messages dropped", request.inbound.session_id, len(removed))
        quoted = " ".join(removed[0].content.split())
        quoted = quoted if len(quoted) <= 80 else quoted[:79] + "…"
        return (
            f'Removed your last message ("{quoted}") and my answer ({len(removed)} messages) from the conversation '
            "and from my memory. The archive keeps them."
        )

    async def export(request: CommandRequest) -> str:
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        if not session.messages:
            return "The conversation is empty; there is nothing to export."
        text = conversation_markdown(session, clock)
        name = f"conversation-{clock.now().strftime('%Y-%m-%d-%H%M')}.md"
        caption = f"The conversation so far ({len(session.messages)} messages)."
        try:
            sent = await request.channel.send_file(inbound.chat_id, name, text.encode("utf-8"), caption)
        except Exception as error:
            log.warning("[Session] /export of %s could not be sent: %s", session.id, error)
            return f"I couldn't send the export file ({error}). Please try again later."
        return "" if sent else text

    registry.register(Command("retry", "answer your last message again", retry))
    registry.register(Command("undo", "drop the last exchange from the conversation", undo))
    registry.register(Command("export", "the conversation so far as a Markdown file", export))


def conversation_markdown(session: AgentSession, clock: Clock) -> str:
    """The session as Markdown: a heading per speaker turn with its time, tool calls and results cut short."""
    lines = [f"# Conversation {session.id}", "", f"Exported {clock.now().strftime('%Y-%m-%d %H:%M %Z')}.", ""]
    for message in session.messages:
        when = message.timestamp.astimezone(clock.zone).strftime("%Y-%m-%d %H:%M")
        if message.role is Role.SYSTEM:
            lines += ["## Summary of the earlier conversation", "", message.content, ""]
        elif message.role is Role.USER:
            who = message.sender.name if message.sender is not None else "You"
            lines += [f"## {who} ({when})", ""]
            if message.quote is not None:
                lines += [f"> {message.quote.author}: {message.quote.text}", ""]
            if message.forwarded_from is not None:
                lines += [f"*{forwarded_note(message.forwarded_from)}*", ""]
            lines += [f"[image: {media.path}]" for media in message.media or []]
            lines += [message.content, ""]
        elif message.role is Role.ASSISTANT:
            if message.content:
                lines += [f"## Assistant ({when})", "", message.content, ""]
            for call in message.tool_calls or []:
                lines += [f"*Tool call `{call.name}`*", ""]
        else:
            output = message.content if len(message.content) <= EXPORT_TOOL_CHARS else (
                message.content[:EXPORT_TOOL_CHARS] + " …"
            )  # fmt: skip
            lines += [f"*Tool `{message.name}` answered:*", "", "```", output, "```", ""]
    return "\n".join(lines).rstrip() + "\n"

"""The live conversation's shape: after a compaction, a summary message first, then the messages after it."""

from __future__ import annotations

from bot.domain.message import Message, Role

# The first line of the summary message (CONTRACT: the session's first message after a compaction).
SUMMARY_HEADER = "[Conversation summary]"


def split_summary(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(`[summary message]` or `[]`, the conversation after it)."""
    if messages and messages[0].role is Role.SYSTEM and messages[0].content.startswith(SUMMARY_HEADER):
        return messages[:1], messages[1:]
    return [], messages

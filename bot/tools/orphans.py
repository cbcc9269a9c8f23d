"""Closing tool calls that never got a result (after `/stop` or a crash), so the provider accepts the
history: every assistant tool call must be followed by its tool result."""

from __future__ import annotations

from bot.domain.message import Message, Role

INTERRUPTED_RESULT = "[No result: the tool call was interrupted (stopped by the user or the bot restarted).]"


def close_orphaned_tool_calls(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """The messages with a placeholder result after each unanswered call, and the placeholders added."""
    if not any(message.tool_calls for message in messages):
        return list(messages), []  # no tool call at all, the common case: checked before every model call
    patched: list[Message] = []
    added: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        patched.append(message)
        index += 1
        if message.role is not Role.ASSISTANT or not message.tool_calls:
            continue
        answered: set[str] = set()
        while index < len(messages) and messages[index].role is Role.TOOL:
            answered.add(messages[index].tool_call_id or "")
            patched.append(messages[index])
            index += 1
        for call in message.tool_calls:
            if call.id not in answered:
                placeholder = Message.tool_result(call, INTERRUPTED_RESULT)
                patched.append(placeholder)
                added.append(placeholder)
    return patched, added

"""The one translation from the domain's `Message` to the OpenAI chat-completions wire format."""

from __future__ import annotations

from typing import Any

from bot.domain.message import Message, Role


def to_openai_message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.role is Role.TOOL:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def to_openai_messages(system_prompt: str, messages: list[Message], turn_prompt: str = "") -> list[dict[str, Any]]:
    """The system prompt first (when there is one), then the conversation as stored, with `turn_prompt`
    (what changes from one message to the next) as a second system message just before the newest
    user message.

    Providers cache a prompt by its prefix: with everything that changes each turn placed after the
    history, each request begins with the whole of the one before, up to where that one's turn
    prompt stood.
    """
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    wire = head + [to_openai_message(message) for message in messages]
    if turn_prompt:
        newest_user = next(
            (len(head) + i for i in range(len(messages) - 1, -1, -1) if messages[i].role is Role.USER), len(wire)
        )
        wire.insert(newest_user, {"role": "system", "content": turn_prompt})
    return wire

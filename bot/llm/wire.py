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


def to_openai_messages(system_prompt: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The system prompt first (when there is one), then the conversation as stored."""
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return head + [to_openai_message(message) for message in messages]

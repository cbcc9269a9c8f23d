"""Layer 1 of context control: old tool results shrink before every model call (no model needed).

Applied to the messages as sent, never to the stored session, so the same history always gives the
same prompt. Only tool results and refused calls' arguments change; user and assistant text never
does. The newest `keepLastToolResults` results are left whole: the model is acting on them right now.

The arguments of a call that was refused (its result is an error) are not sent again when they are
longer than `toolSoftTrimChars`, pruning on or off: the error says what was wrong, and a model that
once sent megabytes of argument would otherwise have them in every later request of the chat, past
any provider's limit.
"""

from __future__ import annotations

import json

from bot.domain.message import Message, Role, ToolCall
from bot.settings import ToolLoopConfig

HARD_CLEAR_PLACEHOLDER = "[Tool output cleared — content was processed in earlier turns]"
# How every failed call's result starts (the registry's and the tool loop's errors).
ERROR_RESULT_PREFIX = "Error:"


def soft_trim(content: str, head: int, tail: int) -> str:
    """Head and tail of `content` around a marker that says what was cut, so the model can re-read it."""
    return (
        f"{content[:head]}\n\n--- trimmed (kept {head} head + {tail} tail of {len(content)} chars) ---\n\n"
        f"{content[len(content) - tail :] if tail else ''}"
    )


def _is_image(content: str) -> bool:
    return content.startswith("data:image/")


def omitted_arguments(arguments: str) -> str:
    """What is sent instead of a refused call's long arguments: valid JSON, saying what was left out."""
    return json.dumps({"omitted": f"{len(arguments)} characters of arguments of a refused call"})


def _cut_refused_arguments(messages: list[Message], limit: int) -> list[Message]:
    refused = {
        message.tool_call_id
        for message in messages
        if message.role is Role.TOOL and message.content.startswith(ERROR_RESULT_PREFIX)
    }
    result = list(messages)
    for index, message in enumerate(messages):
        if message.role is not Role.ASSISTANT or not message.tool_calls:
            continue
        if not any(call.id in refused and len(call.arguments) > limit for call in message.tool_calls):
            continue
        calls = [
            ToolCall(id=call.id, name=call.name, arguments=omitted_arguments(call.arguments))
            if call.id in refused and len(call.arguments) > limit
            else call
            for call in message.tool_calls
        ]
        result[index] = message.model_copy(update={"tool_calls": calls})
    return result


def prune_tool_results(messages: list[Message], config: ToolLoopConfig) -> list[Message]:
    """`messages` with old tool results trimmed or cleared, and refused calls' long arguments left out;
    the input list is not changed."""
    if not any(message.role is Role.TOOL for message in messages):
        return list(messages)  # no tool result, nothing to prune (most chats): one pass, not three
    messages = _cut_refused_arguments(messages, config.tool_soft_trim_chars)
    if not config.pruning_enabled:
        return messages
    tool_positions = [index for index, message in enumerate(messages) if message.role is Role.TOOL]
    pruned = list(messages)
    protected = set(tool_positions[len(tool_positions) - config.keep_last_tool_results :])
    if config.keep_last_tool_results == 0:
        protected = set()
    for age, index in enumerate(reversed(tool_positions)):
        message = messages[index]
        if index in protected or _is_image(message.content):
            continue
        if age >= config.tool_hard_clear_after:
            if message.content != HARD_CLEAR_PLACEHOLDER:
                pruned[index] = message.model_copy(update={"content": HARD_CLEAR_PLACEHOLDER})
        elif len(message.content) > config.tool_soft_trim_chars:
            trimmed = soft_trim(message.content, config.tool_soft_trim_head, config.tool_soft_trim_tail)
            pruned[index] = message.model_copy(update={"content": trimmed})
    return pruned

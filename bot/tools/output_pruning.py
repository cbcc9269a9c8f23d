"""Layer 1 of context control: old tool results shrink before every model call (no model needed).

Applied to the messages as sent, never to the stored session, so the same history always gives the
same prompt. Only tool results change; user and assistant text never does. The newest
`keepLastToolResults` results are left whole: the model is acting on them right now.
"""

from __future__ import annotations

from bot.domain.message import Message, Role
from bot.settings import ToolLoopConfig

HARD_CLEAR_PLACEHOLDER = "[Tool output cleared — content was processed in earlier turns]"


def soft_trim(content: str, head: int, tail: int) -> str:
    """Head and tail of `content` around a marker that says what was cut, so the model can re-read it."""
    return (
        f"{content[:head]}\n\n--- trimmed (kept {head} head + {tail} tail of {len(content)} chars) ---\n\n"
        f"{content[len(content) - tail :] if tail else ''}"
    )


def _is_image(content: str) -> bool:
    return content.startswith("data:image/")


def prune_tool_results(messages: list[Message], config: ToolLoopConfig) -> list[Message]:
    """`messages` with old tool results trimmed or cleared; the input list is not changed."""
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

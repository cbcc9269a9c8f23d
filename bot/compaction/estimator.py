"""`TokenEstimator`: how many tokens a text or a conversation costs, without downloading a tokenizer.

A characters-per-token ratio: 3.5 is a fair average for English prose and code on current
tokenizers; it errs towards over-counting, which is the safe side for a budget.
"""

from __future__ import annotations

import math

from bot.domain.message import Message

DEFAULT_CHARS_PER_TOKEN = 3.5
# Role, separators and framing the provider adds around every message.
MESSAGE_OVERHEAD_TOKENS = 4


class TokenEstimator:
    """Estimates token counts from character counts."""

    def __init__(self, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token

    def text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def message(self, message: Message) -> int:
        tokens = MESSAGE_OVERHEAD_TOKENS + self.text(message.content)
        for call in message.tool_calls or []:
            tokens += self.text(call.name) + self.text(call.arguments)
        return tokens

    def messages(self, messages: list[Message]) -> int:
        return sum(self.message(message) for message in messages)

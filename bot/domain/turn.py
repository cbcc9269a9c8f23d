"""What a turn reports and shows: the provider's `Usage`, the live `ReplyStream`, and which system-prompt
parts are made anew each turn (`TURN_PROMPT_PARTS`). The turn's own state, `TurnContext`, is the
pipeline's (`bot.pipeline.turn`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.domain.session_metadata import ProviderUsage

# Parts of the system prompt made anew for every message (`TurnContext.system_prompt_parts` keys): they
# go after the history, so the rest (persona, MEMORY.md, the history itself) is a prefix the provider
# can cache from one request to the next.
TURN_PROMPT_PARTS = frozenset({"time", "memory.pack", "memory.notes", "rag"})


@dataclass
class Usage:
    """Token counts the provider reported for one model call."""

    prompt_tokens: int
    completion_tokens: int
    model: str
    # Of the prompt tokens, those the provider served from its prompt cache (billed at a fraction).
    cached_tokens: int = 0

    def to_json_dict(self) -> ProviderUsage:
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "cachedTokens": self.cached_tokens,
            "model": self.model,
        }


class ReplyStream(Protocol):
    """A reply shown while the model writes it. The channel decides how often the user sees updates."""

    async def update(self, text: str) -> None:
        """The whole text so far (not a delta)."""

    async def finish(self, text: str) -> None:
        """The final text; delivered exactly once, however many updates came before."""

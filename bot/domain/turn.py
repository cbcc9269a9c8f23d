"""What a turn reports and shows: the provider's `Usage`, the live `ReplyStream`, and the sections of the
system prompt (`PromptSection`). The turn's own state, `TurnContext`, is the pipeline's
(`bot.pipeline.turn`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from bot.domain.session_metadata import ProviderUsage


class PromptSection(StrEnum):
    """A section of the system prompt: its one name, from context building (20) to the budget, the plan
    and a cut marker. `TurnContext.system_prompt_parts` holds the sections in the order they are sent."""

    PERSONA = "base"
    TIME = "time"
    PEOPLE = "people"
    SKILLS = "skills"
    SKILL = "skill"
    LONG_TERM = "memory"
    MEMORY_PACK = "memory.pack"
    DAILY_NOTES = "memory.notes"
    RELEVANT_MEMORY = "rag"

    @property
    def made_each_turn(self) -> bool:
        """Made anew for every message: sent after the history, so that the rest (persona, MEMORY.md, the
        history itself) is a prefix the provider can cache from one request to the next."""
        return self in _MADE_EACH_TURN


_MADE_EACH_TURN = frozenset(
    {PromptSection.TIME, PromptSection.MEMORY_PACK, PromptSection.DAILY_NOTES, PromptSection.RELEVANT_MEMORY}
)


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

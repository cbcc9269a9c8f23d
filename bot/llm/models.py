"""`ModelRegistry`: context limits and tier of each model, from `config/models.json`.

A workspace may add or override models in `preferences/models.json` (same format) without
touching the package. Names are matched exactly first, then by the longest known prefix (so
`gpt-4o-2024-08-06` finds `gpt-4o`, `qwen2.5:7b` finds `qwen2.5`), then without an OpenRouter-style
`provider/` prefix; anything else gets the `default` entry.

A window learned from the endpoint (`LearnedWindows`) overrides the entry's when it is smaller: the
spec then plans for the window the endpoint really has.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from bot.llm.windows import LearnedWindow, LearnedWindows

log = logging.getLogger(__name__)


class Tier(StrEnum):
    """What a model is good for: `smart` for chat, `balanced` for summaries, `fast` for cheap chores."""

    SMART = "smart"
    BALANCED = "balanced"
    FAST = "fast"


class _ModelEntry(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    max_input_tokens: int = Field(gt=0)
    max_output_tokens: int = Field(gt=0)
    tier: Tier = Tier.BALANCED


class _ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: _ModelEntry | None = None
    models: dict[str, _ModelEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class ModelSpec:
    """The limits the bot plans a model's prompts with."""

    name: str
    max_input_tokens: int
    max_output_tokens: int
    tier: Tier
    known: bool
    # The window learned from the endpoint, when it is smaller than the registry's (`max_input_tokens` is it).
    learned: LearnedWindow | None = None
    # The registry's own window, when a learned one overrides it.
    listed_input_tokens: int | None = None


def window_note(spec: ModelSpec) -> str:
    """What `/status` and `/context` say of a window learned from the endpoint; empty when there is none."""
    if spec.learned is None:
        return ""
    listed = f"; the registry says {spec.listed_input_tokens:,}" if spec.listed_input_tokens else ""
    return f"window {spec.max_input_tokens:,} tokens (learned from a {spec.learned.how}{listed})"


# Of a learned window, the reply may take at most this share: the rest is the prompt's.
LEARNED_OUTPUT_SHARE = 0.25


class ModelRegistry:
    """Looks up a model's limits by name."""

    def __init__(
        self, default: _ModelEntry, models: dict[str, _ModelEntry], windows: LearnedWindows | None = None
    ) -> None:
        self._default = default
        self._models = models
        self.windows = windows

    @classmethod
    def load(
        cls, shipped: Path, workspace_override: Path | None = None, windows: LearnedWindows | None = None
    ) -> ModelRegistry:
        base = _ModelsFile.model_validate_json(shipped.read_text(encoding="utf-8"))
        if base.default is None:
            raise ValueError(f"{shipped}: a 'default' entry is required")
        default, models = base.default, dict(base.models)
        if workspace_override is not None and workspace_override.is_file():
            try:
                extra = _ModelsFile.model_validate_json(workspace_override.read_text(encoding="utf-8"))
            except ValidationError as error:
                log.error("[Config] Refused %s: %s", workspace_override, error.errors()[0]["msg"])
            else:
                default = extra.default or default
                models.update(extra.models)
        return cls(default, models, windows)

    def lookup(self, name: str) -> ModelSpec:
        entry_name = self._match(name)
        entry = self._models[entry_name] if entry_name else self._default
        spec = ModelSpec(name, entry.max_input_tokens, entry.max_output_tokens, entry.tier, entry_name is not None)
        learned = self.windows.get(name) if self.windows is not None else None
        if learned is None or learned.tokens >= spec.max_input_tokens:
            return spec
        # The refusals state the whole window (prompt and reply): the reply's room comes out of it.
        output = min(spec.max_output_tokens, int(learned.tokens * LEARNED_OUTPUT_SHARE))
        return replace(
            spec, max_input_tokens=learned.tokens, max_output_tokens=max(output, 1), learned=learned,
            listed_input_tokens=spec.max_input_tokens,
        )  # fmt: skip

    def learn_window(self, name: str, tokens: int, how: str, evidence: str = "") -> bool:
        """`name`'s window is `tokens` (learned `how`); True when that is news (smaller than planned for)."""
        if self.windows is None:
            return False
        return self.windows.learn(name, tokens, how, self.lookup(name).max_input_tokens, evidence)

    def _match(self, name: str) -> str | None:
        for candidate in (name, name.split("/", 1)[-1]):
            if candidate in self._models:
                return candidate
            prefixes = [known for known in self._models if candidate.startswith(known)]
            if prefixes:
                return max(prefixes, key=len)
        return None

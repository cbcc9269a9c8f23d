"""`ModelRegistry`: context limits and tier of each model, from `config/models.json`.

A workspace may add or override models in `preferences/models.json` (same format) without
touching the package. A hand edit's mistake there is refused alone: an entry that does not validate is
left out (the shipped entry of that name, if any, stays), the other entries apply, and one log line names
the file, the key and the nearest valid key (`ModelRegistry.problems`, which `python -m bot doctor` shows).

Names are matched exactly first, then by the longest known prefix (so `gpt-4o-2024-08-06` finds `gpt-4o`,
`qwen2.5:7b` finds `qwen2.5`), then without an OpenRouter-style `provider/` prefix; anything else gets
the `default` entry.

A window learned from the endpoint (`LearnedWindows`) overrides the entry's when it is smaller: the
spec then plans for the window the endpoint really has.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from bot.config_problems import SUGGESTION_CUTOFF, InvalidJsonFile, quoted, read_json_object, read_settings_text
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


ENTRY_KEYS = [field.alias or name for name, field in _ModelEntry.model_fields.items()]
FILE_KEYS = list(_ModelsFile.model_fields)


def read_models_file(path: Path) -> tuple[_ModelsFile, list[str]]:
    """A workspace's models file: the entries that validate, and one line per mistake (the file, the key, what
    is wrong, the nearest valid key); an entry with a mistake is left out whole, the others kept."""
    try:
        data = read_json_object(read_settings_text(path), path)
    except FileNotFoundError:
        return _ModelsFile(), []
    except OSError as error:
        return _ModelsFile(), [f"{path}: cannot be read: {error}"]
    except InvalidJsonFile as error:
        return _ModelsFile(), [str(error)]
    problems = [
        f"{path}: {key}: not a key of the file{_nearest(key, FILE_KEYS)}" for key in data if key not in FILE_KEYS
    ]
    default = _entry(path, "default", data["default"], problems) if "default" in data else None
    models: dict[str, _ModelEntry] = {}
    listed = data.get("models", {})
    if not isinstance(listed, dict):
        problems.append(f"{path}: models: {quoted(listed)} is refused: it takes an object of model names")
        listed = {}
    for name, value in listed.items():
        entry = _entry(path, f"models.{name}", value, problems)
        if entry is not None:
            models[name] = entry
    return _ModelsFile(default=default, models=models), problems


def _entry(path: Path, key: str, value: object, problems: list[str]) -> _ModelEntry | None:
    try:
        return _ModelEntry.model_validate(value)
    except ValidationError as error:
        unknown = [str(item["loc"][-1]) for item in error.errors() if item["type"] == "extra_forbidden"]
        # A key missing because it is misspelt is said once, as the misspelling.
        meant = {near for name in unknown for near in difflib.get_close_matches(name, ENTRY_KEYS, 1, SUGGESTION_CUTOFF)}
        for item in error.errors():
            where = ".".join([key, *(str(part) for part in item["loc"])])
            if item["type"] == "extra_forbidden":
                problems.append(f"{path}: {where}: not a key of an entry{_nearest(str(item['loc'][-1]), ENTRY_KEYS)}")
            elif item["type"] == "missing" and str(item["loc"][-1]) in meant:
                continue
            elif item["type"] == "missing":
                problems.append(f"{path}: {where}: missing (an entry takes {', '.join(ENTRY_KEYS)})")
            else:
                problems.append(f"{path}: {where}: {quoted(item['input'])} is refused: {item['msg']}")
        return None


def _nearest(key: str, keys: list[str]) -> str:
    found = difflib.get_close_matches(key, keys, 1, SUGGESTION_CUTOFF)
    return f"; did you mean `{found[0]}`?" if found else f" (it has {', '.join(keys)})"


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
        self,
        default: _ModelEntry,
        models: dict[str, _ModelEntry],
        windows: LearnedWindows | None = None,
        problems: list[str] | None = None,
    ) -> None:
        self._default = default
        self._models = models
        self.windows = windows
        # What was refused in the workspace's models file, one line each (empty when nothing was).
        self.problems = problems or []

    @classmethod
    def load(
        cls, shipped: Path, workspace_override: Path | None = None, windows: LearnedWindows | None = None
    ) -> ModelRegistry:
        base = _ModelsFile.model_validate_json(shipped.read_text(encoding="utf-8"))
        if base.default is None:
            raise ValueError(f"{shipped}: a 'default' entry is required")
        default, models = base.default, dict(base.models)
        problems: list[str] = []
        if workspace_override is not None:
            extra, problems = read_models_file(workspace_override)
            for problem in problems:
                log.error("[Config] Refused %s", problem)
            default = extra.default or default
            models.update(extra.models)
        return cls(default, models, windows, problems)

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

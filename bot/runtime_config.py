"""Loads `runtime-config.json` and keeps it current while the bot runs.

The workspace file is partial: it is merged key by key over the shipped defaults. It is re-read
whenever it changes (checked on every use, a single `stat`), so an edit takes effect on the next
message. A file that is not valid JSON, has a wrong type or an unknown key is refused with one log
line naming the file and the key, and the last good configuration stays in force.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.settings import RuntimeConfig, read_at_start_keys
from bot.storage.files import FileSignature, file_signature

log = logging.getLogger(__name__)


SCHEMA_KEY = "$schema"


class InvalidRuntimeConfig(ValueError):
    """The configuration file was refused; the message names the file and the offending key."""


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` over `base`, section by section; a non-object value replaces whole."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe_validation_error(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{key}: {item['msg']}")
    return "; ".join(problems)


def parse_runtime_config(
    text: str, source: Path, base: dict[str, Any], overrides: dict[str, Any] | None = None
) -> RuntimeConfig:
    """Validate `text` merged over `base`, `overrides` over both; `InvalidRuntimeConfig` says what and where."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidRuntimeConfig(
            f"{source}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from error
    if not isinstance(data, dict):
        raise InvalidRuntimeConfig(f"{source}: (top level): expected a JSON object")
    # `$schema` names the JSON Schema an editor checks the file against; it is no setting.
    data.pop(SCHEMA_KEY, None)
    try:
        return RuntimeConfig.model_validate(deep_merge(deep_merge(base, data), overrides or {}))
    except ValidationError as error:
        raise InvalidRuntimeConfig(f"{source}: {_describe_validation_error(error)}") from error


def _value_at(config: RuntimeConfig, path: tuple[str, ...]) -> object:
    value: object = config
    for name in path:
        value = getattr(value, name)
    return value


def changed_at_start_keys(before: RuntimeConfig, after: RuntimeConfig) -> list[str]:
    """The settings read only at start whose value differs between two configurations."""
    return [key for key, path in read_at_start_keys().items() if _value_at(before, path) != _value_at(after, path)]


class RuntimeConfigStore:
    """The configuration in force: shipped defaults, the workspace file merged over them, and `overrides`
    (what the environment sets, e.g. `BOT_MODEL` for `llm.model`) over both, whatever the file says."""

    def __init__(self, defaults_path: Path, workspace_path: Path, overrides: dict[str, Any] | None = None) -> None:
        self._workspace_path = workspace_path
        self._defaults_path = defaults_path
        self._defaults: dict[str, Any] = json.loads(defaults_path.read_text(encoding="utf-8"))
        self._overrides = overrides or {}
        self._config = parse_runtime_config(json.dumps(self._defaults), defaults_path, {}, self._overrides)
        self._signature: FileSignature | None = None
        self._lock = asyncio.Lock()

    @property
    def path(self) -> Path:
        return self._workspace_path

    def in_force(self) -> RuntimeConfig:
        """The configuration in force, without checking the file (see `current`); a getter, to hand to what
        reads the configuration when it needs it."""
        return self._config

    async def current(self) -> RuntimeConfig:
        """The configuration in force, re-reading the workspace file first if it changed."""
        # Asked several times per message: the check is one `stat` (microseconds) done inline, as for
        # MEMORY.md (`TextFileCache`); a hop through the worker threads costs far more, and only the read of
        # a changed file goes there.
        signature = self._file_signature()
        if signature != self._signature:
            async with self._lock:
                if signature != self._signature:
                    await asyncio.to_thread(self._reload, signature)
        return self._config

    def current_sync(self) -> RuntimeConfig:
        """`current` for a caller that cannot await: the Telegram channel, which gates an update (groups,
        image size) before handing it on, so an edit applies to the very next update. The check is the same
        `stat`; a changed file (rare: an edit) is read on the spot, as `set_overrides` does."""
        signature = self._file_signature()
        if signature != self._signature:
            self._reload(signature)
        return self._config

    def set_overrides(self, overrides: dict[str, Any]) -> RuntimeConfig:
        """Merge `overrides` over the ones in force (e.g. `/model` setting `llm.model`) and apply them now."""
        self._overrides = deep_merge(self._overrides, overrides)
        self._reload(self._file_signature())
        return self._config

    def load_now(self) -> RuntimeConfig:
        """Read the file synchronously (start-up and the command line)."""
        self._reload(self._file_signature())
        return self._config

    def _file_signature(self) -> FileSignature | None:
        return file_signature(self._workspace_path)

    def _reload(self, signature: FileSignature | None) -> None:
        # Remember the signature even when refused, so one bad edit is one log line, not one per message.
        self._signature = signature
        if signature is None:
            self._config = parse_runtime_config("{}", self._workspace_path, self._defaults, self._overrides)
            return
        try:
            text = self._workspace_path.read_text(encoding="utf-8")
            config = parse_runtime_config(text, self._workspace_path, self._defaults, self._overrides)
        except (InvalidRuntimeConfig, UnicodeDecodeError, OSError) as error:
            log.error("[Config] Refused %s; keeping the last good configuration", error)
            return
        if config != self._config:
            log.info("[Config] Loaded %s", self._workspace_path)
            for key in changed_at_start_keys(self._config, config):
                log.warning(
                    "[Config] %s changed in %s: it is read at start and applies after a restart",
                    key,
                    self._workspace_path,
                )
        self._config = config

"""Loads `runtime-config.json` and keeps it current while the bot runs.

The workspace file is partial: it is merged key by key over the shipped defaults. It is re-read
whenever it changes (checked on every use, a single `stat`), so an edit takes effect on the next
message. A file that is not valid JSON is refused whole, and the last good configuration stays in
force. A bad key or value (an unknown key, a wrong type, a value out of range) is refused alone: the
file's other keys apply, the refused key keeps the value it had (the default, at start), one log line
names the file, the key, what is wrong and the nearest valid key or value, and the owner is told once
(`OwnerNotices`). The keys in error are listed by `RuntimeConfigStore.problems` until they are fixed.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.config_problems import (
    ConfigProblem,
    InvalidJsonFile,
    problem_for,
    quoted,
    read_json_object,
    read_settings_text,
    repeated_keys,
)
from bot.notices import OwnerNotices
from bot.settings import RuntimeConfig, read_at_start_keys
from bot.shipped import shipped_path
from bot.storage.files import FileSignature, file_signature, write_atomic

log = logging.getLogger(__name__)

# The key of a problem with the file as a whole (not JSON, not an object).
WHOLE_FILE = "(file)"
# Owner notices about runtime-config keys are kept under this prefix, then the key.
NOTICE_PREFIX = "runtime-config:"


SCHEMA_KEY = "$schema"
# How the configuration held by the database is named in log lines and owner notices.
DATABASE_SOURCE = "runtime-config.json in the database"
# What the configuration in force was read from: the file (its signature), or the database's row (its version).
Signature = FileSignature | tuple[str, int] | None


class InvalidRuntimeConfig(InvalidJsonFile):
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


@dataclass(frozen=True)
class LoadedConfig:
    """A file read over the defaults: the configuration it gives, and the keys refused on the way."""

    config: RuntimeConfig
    problems: list[ConfigProblem]


def _refused_path(data: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The key of the file that an error refuses: the deepest object key on the error's path that the file
    holds (a list is refused whole); an entry of `mcpServers` stands or falls whole."""
    path: list[str] = []
    node: Any = data
    for part in loc:
        if not isinstance(node, dict) or not isinstance(part, str) or part not in node:
            break
        path.append(part)
        node = node[part]
    if len(path) > 2 and path[0] == "mcpServers":
        del path[2:]
    return tuple(path)


def _pop_path(data: dict[str, Any], path: tuple[str, ...]) -> None:
    node = data
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


def _get_path(data: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def parse_runtime_config(
    text: str,
    source: Path | str,
    base: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    in_force: RuntimeConfig | None = None,
) -> LoadedConfig:
    """`text` merged over `base`, `overrides` over both. A key that does not validate is left out (and keeps
    its value in `in_force`, when it has one) and named in `problems`; `InvalidRuntimeConfig` when the
    text is not a JSON object at all."""
    try:
        data = read_json_object(text, source)
    except InvalidJsonFile as error:
        raise InvalidRuntimeConfig(str(error)) from error
    # `$schema` names the JSON Schema an editor checks the file against; it is no setting.
    data.pop(SCHEMA_KEY, None)
    kept: dict[str, Any] = copy.deepcopy(data)
    restored: dict[str, Any] = {}
    previous = in_force.model_dump(mode="json", by_alias=True) if in_force is not None else {}
    problems: list[ConfigProblem] = []

    def leave_out(path: tuple[str, ...]) -> None:
        """A refused key goes from what is read; it keeps the value in force, if there is one."""
        if _get_path(kept, path)[0]:
            _pop_path(kept, path)
        found, value = _get_path(previous, path)
        if found:
            _set_path(restored, path, value)

    # A key given twice is a mistake JSON would keep quiet about (the last one wins): it is refused as any other.
    for path, given in repeated_keys(text):
        if path and _get_path(kept, path)[0]:
            leave_out(path)
            times = "twice" if len(given) == 2 else f"{len(given)} times"
            values = ", then ".join(quoted(value) for value in given)
            problems.append(ConfigProblem(".".join(path), f"given {times} ({values}): keep the one you mean"))
    while True:
        try:
            merged = deep_merge(deep_merge(deep_merge(base, kept), restored), overrides or {})
            config = RuntimeConfig.model_validate(merged)
        except ValidationError as error:
            refused: dict[tuple[str, ...], ConfigProblem] = {}
            for item in error.errors():
                path = _refused_path(kept, item["loc"])
                if not path:  # not from a key of the file: nothing to leave out
                    raise InvalidRuntimeConfig(f"{source}: {_describe_validation_error(error)}") from error
                refused.setdefault(path, problem_for(path, item))
            for path, problem in refused.items():
                leave_out(path)
                problems.append(problem)
            continue
        return LoadedConfig(config, problems)


def runtime_config_problems(path: Path, defaults_path: Path | None = None) -> list[ConfigProblem]:
    """What is wrong in the runtime-config file at `path`, key by key (empty when nothing is, or there is no
    file): what `/status` lists and what a check of the setup reports. Read over the shipped defaults."""
    defaults = json.loads((defaults_path or shipped_path("config") / "runtime-config.json").read_text("utf-8"))
    try:
        return parse_runtime_config(read_settings_text(path), path, defaults).problems
    except FileNotFoundError:
        return []
    except OSError as error:
        return [ConfigProblem(WHOLE_FILE, f"cannot be read: {error}")]
    except InvalidJsonFile as error:
        return [ConfigProblem(WHOLE_FILE, str(error).removeprefix(f"{path}: "))]


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
    (what the environment sets, e.g. `BOT_MODEL` for `llm.model`) over both, whatever the file says.
    A refused key is told to the owner once through `notices`, and settled there once it is fixed."""

    def __init__(
        self,
        defaults_path: Path,
        workspace_path: Path,
        overrides: dict[str, Any] | None = None,
        notices: OwnerNotices | None = None,
    ) -> None:
        self._workspace_path = workspace_path
        self._defaults_path = defaults_path
        self._defaults: dict[str, Any] = json.loads(defaults_path.read_text(encoding="utf-8"))
        self._overrides = overrides or {}
        self._notices = notices
        self._config = parse_runtime_config(json.dumps(self._defaults), defaults_path, {}, self._overrides).config
        self._problems: list[ConfigProblem] = []
        self._signature: Signature = None
        # The database's row (version, text) when it holds the configuration: it stands for the file.
        self._row: tuple[int, str] | None = None
        self._row_writer: Callable[[str], Awaitable[int]] | None = None
        self._lock = asyncio.Lock()
        self._listeners: list[Callable[[RuntimeConfig], None]] = []
        self._announced = self._config
        # Whether a configuration was read from the file (or the row): until then, a refused one leaves the
        # shipped defaults in force, not a last good configuration.
        self._read_once = False

    @property
    def path(self) -> Path:
        return self._workspace_path

    def use_database(self, row: tuple[int, str] | None, writer: Callable[[str], Awaitable[int]]) -> None:
        """Keep the configuration in the database: `row` (version, text) is what it holds now (None: no row yet,
        the file applies until one is written), `writer` stores a new text and returns its version."""
        self._row = row
        self._row_writer = writer

    def follow_row(self, row: tuple[int, str] | None) -> None:
        """The database's row as read now; a new version is read over the defaults on the next use."""
        self._row = row

    def written_text(self) -> str | None:
        """The text the configuration is read from (the database's row, else the file), None when there is none;
        `InvalidRuntimeConfig` when the file is there but cannot be read."""
        if self._row is not None:
            return self._row[1]
        try:
            return read_settings_text(self._workspace_path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise InvalidRuntimeConfig(f"{self.source()}: cannot be read: {error}") from error
        except InvalidJsonFile as error:
            raise InvalidRuntimeConfig(str(error)) from error

    def with_changes(self, changes: dict[str, Any]) -> str:
        """The stored text (see `written_text`) with `changes` merged in, key by key, as the bot writes it back.
        `InvalidRuntimeConfig` when that text is not a JSON object the bot can read: what a person wrote is
        never written over, so the slip must be fixed (or the file removed) first."""
        written = self.written_text()
        try:
            merged = deep_merge(read_json_object(written, self.source()) if written is not None else {}, changes)
        except InvalidJsonFile as error:
            raise InvalidRuntimeConfig(str(error)) from error
        return json.dumps(merged, indent=2, ensure_ascii=False) + "\n"

    def source(self) -> Path | str:
        """Where the configuration is read from, as log lines and the owner are told."""
        return DATABASE_SOURCE if self._row is not None else self._workspace_path

    async def write(self, text: str) -> RuntimeConfig:
        """Store `text` as the configuration (in the database when it keeps it, else the file), applied now."""
        if self._row_writer is not None:
            self._row = (await self._row_writer(text), text)
        else:
            await write_atomic(self._workspace_path, text.encode("utf-8"))
        return await self.current()

    def in_database(self) -> bool:
        """Whether the configuration is kept in the database, where every process sharing it reads it."""
        return self._row_writer is not None

    async def write_settings(self, changes: dict[str, Any]) -> RuntimeConfig:
        """`changes` merged into the stored text (`with_changes`), written back by `write`."""
        return await self.write(self.with_changes(changes))

    def in_force(self) -> RuntimeConfig:
        """The configuration in force, without checking the file (see `current`); a getter, to hand to what
        reads the configuration when it needs it."""
        return self._config

    def on_change(self, listener: Callable[[RuntimeConfig], None]) -> None:
        """Call `listener` with each new configuration as soon as it is read (on the event loop's thread), so
        that what must follow an edit (MCP servers starting or stopping) does not wait for its next use."""
        self._listeners.append(listener)

    def problems(self) -> list[ConfigProblem]:
        """The keys of the file refused now (or the whole file, when it is not valid JSON), until fixed."""
        return list(self._problems)

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
                    self._after_reload()
        return self._config

    def current_sync(self) -> RuntimeConfig:
        """`current` for a caller that cannot await: the Telegram channel, which gates an update (groups,
        image size) before handing it on, so an edit applies to the very next update. The check is the same
        `stat`; a changed file (rare: an edit) is read on the spot, as `set_overrides` does."""
        signature = self._file_signature()
        if signature != self._signature:
            self._reload(signature)
            self._after_reload()
        return self._config

    def set_overrides(self, overrides: dict[str, Any]) -> RuntimeConfig:
        """Merge `overrides` over the ones in force (e.g. `/model` setting `llm.model`) and apply them now."""
        self._overrides = deep_merge(self._overrides, overrides)
        self._reload(self._file_signature())
        self._after_reload()
        return self._config

    def load_now(self) -> RuntimeConfig:
        """Read the file synchronously (start-up and the command line)."""
        self._reload(self._file_signature())
        self._after_reload()
        return self._config

    def _file_signature(self) -> Signature:
        if self._row is not None:
            return ("database", self._row[0])
        try:
            return file_signature(self._workspace_path)
        except OSError as error:
            # A folder on the path the bot may not enter, a symlink loop: the read that follows says why.
            return (f"unreadable: {error}", 0)

    def _reload(self, signature: Signature) -> None:
        # Remember the signature even when refused, so one bad edit is one log line, not one per message.
        self._signature = signature
        text = "{}"
        source = self.source()
        if self._row is not None:
            text = self._row[1]
        elif signature is not None:
            try:
                text = read_settings_text(self._workspace_path)
            except OSError as error:
                self._refuse_whole(f"cannot be read: {error}")
                return
            except InvalidJsonFile as error:
                self._refuse_whole(str(error).removeprefix(f"{source}: "))
                return
        try:
            loaded = parse_runtime_config(text, source, self._defaults, self._overrides, self._config)
        except InvalidRuntimeConfig as error:
            self._refuse_whole(str(error).removeprefix(f"{source}: "))
            return
        config = loaded.config
        for problem in loaded.problems:
            log.error(
                "[Config] Refused %s in %s: %s (the file's other keys apply)",
                problem.key, source, problem.describe().removeprefix(f"{problem.key}: "),
            )  # fmt: skip
        self._problems = loaded.problems
        self._read_once = True
        if config != self._config:
            log.info("[Config] Loaded %s", source)
            for key in changed_at_start_keys(self._config, config):
                log.warning(
                    "[Config] %s changed in %s: it is read at start and applies after a restart",
                    key,
                    source,
                )
        self._config = config

    def _in_force_instead(self) -> str:
        return "the last good configuration" if self._read_once else "the shipped defaults"

    def _refuse_whole(self, reason: str) -> None:
        log.error("[Config] Refused %s: %s; keeping %s", self.source(), reason, self._in_force_instead())
        self._problems = [ConfigProblem(WHOLE_FILE, reason)]

    def _after_reload(self) -> None:
        """On the event loop's thread (the notices send from it, the listeners start tasks): tell the owner of
        each refused key not told yet, settle those fixed, and hand a new configuration to the listeners."""
        if self._config != self._announced:
            self._announced = self._config
            for listener in self._listeners:
                listener(self._config)
        if self._notices is None:
            return
        now = {NOTICE_PREFIX + problem.key for problem in self._problems}
        for key in self._notices.keys(NOTICE_PREFIX) - now:
            self._notices.settle(key)
        for problem in self._problems:
            self._notices.tell_once(NOTICE_PREFIX + problem.key, self._owner_text(problem))

    def _owner_text(self, problem: ConfigProblem) -> str:
        if problem.key == WHOLE_FILE:
            return (
                f"I could not read {self.source()}: {problem.problem}. "
                + ("The last good configuration stays in force" if self._read_once else "The shipped defaults apply")
                + " until the file is fixed."
            )
        described = problem.describe()
        return (
            f"A setting in {self.source()} was refused: {described}{'' if described.endswith('?') else '.'} "
            "The file's other settings are in force; this one is left out until it is fixed (/status lists it "
            "meanwhile)."
        )

"""The environment read at start, for every command: a value the bot cannot use stops it with exit
status 2 and one line per variable that names it and what it accepts, never a traceback.

`read_environment` checks what `EnvSettings` declares (a log level, a mode or a backend by name, a port
as a number, a URL by its scheme), the time zone, and that the workspace can be created, without creating
anything: `doctor` and `onboard` read the environment this way too.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from bot.clock import InvalidTimezone, resolve_timezone
from bot.config_problems import accepted, nearest_value, quoted
from bot.settings import EnvSettings


class InvalidEnvironment(ValueError):
    """Environment variables with values the bot cannot use: one line each, naming the variable."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def variable_line(variable: str, value: str | None, what: str) -> str:
    """`Invalid environment: TELEGRAM_MODE="poll": it takes one of "polling", "webhook"; did you mean ...`."""
    shown = f"={quoted(value)}" if value is not None else ""
    return f"Invalid environment: {variable}{shown}: {what}"


def _lines_of(error: ValidationError) -> list[str]:
    lines = []
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else ""
        field = EnvSettings.model_fields.get(name)
        value = item.get("input")
        secret = field is not None and "SecretStr" in str(field.annotation)
        shown = None if secret or not isinstance(value, str) else value
        if field is None or item["type"] == "value_error":
            what = item["msg"].removeprefix("Value error, ")
        else:
            what = f"it takes {accepted(field).removesuffix(', or null')}"
            nearest = nearest_value(field, value)
            if nearest is not None and not secret:
                what += f"; did you mean {quoted(nearest)}?"
        lines.append(variable_line(name.upper(), shown, what))
    return lines


def workspace_problem(path: Path) -> str | None:
    """Why the workspace at `path` cannot be created or written, or None when it can (nothing is created)."""
    try:
        if path.exists():
            if not path.is_dir():
                return f"{path} exists and is not a folder"
            if not os.access(path, os.W_OK | os.X_OK):
                return f"{path} is not writable by this user"
            return None
        ancestor = next(parent for parent in path.absolute().parents if parent.exists())
    except OSError as error:
        return f"{path} cannot be reached ({error.strerror or error})"
    if not ancestor.is_dir():
        return f"{ancestor} on its path is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create folders in {ancestor} as this user"
    return None


def workspace_line(path: Path, reason: str) -> str:
    return variable_line(
        "BOT_WORKSPACE", str(path), f"cannot be created: {reason}; it takes a folder the bot can write"
    )


def read_environment(env_file: Path | None = Path(".env")) -> EnvSettings:
    """The environment (and `env_file`) as `EnvSettings`, or `InvalidEnvironment` naming every bad variable."""
    try:
        env = EnvSettings(_env_file=env_file)
    except ValidationError as error:
        raise InvalidEnvironment(_lines_of(error)) from None
    lines = []
    try:
        resolve_timezone(env.bot_timezone)
    except InvalidTimezone:
        lines.append(
            variable_line(
                "BOT_TIMEZONE",
                env.bot_timezone,
                "it takes a time zone name such as Europe/Berlin (unset: the machine's)",
            )
        )
    problem = workspace_problem(env.bot_workspace)
    if problem is not None:
        lines.append(workspace_line(env.bot_workspace, problem))
    if lines:
        raise InvalidEnvironment(lines)
    return env

"""What is wrong with a setting, said so that a person can fix it: the key, the fault, what it accepts,
and the nearest valid key or value ("did you mean `memory.recentDays`?").

Used for `runtime-config.json` (a key refused alone, see `bot.runtime_config`) and for the environment
(a variable refused at start, see `bot.environment`): both describe a pydantic field the same way. A file
a person edits by hand (`runtime-config.json`, `models.json`) is read by `read_json_object`, which names
the slips of a hand edit.
"""

from __future__ import annotations

import difflib
import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from bot.settings import ConfigSection, RuntimeConfig, settings_of
from bot.storage.files import BYTE_ORDER_MARK

# How close a key or value must be to be offered as "did you mean" (difflib's ratio).
SUGGESTION_CUTOFF = 0.6
# A wrong value is quoted in a message at most this long.
MAX_QUOTED_CHARS = 60


@dataclass(frozen=True)
class ConfigProblem:
    """One refused key of a configuration file: its dotted camelCase key and what to do about it."""

    key: str
    problem: str
    accepts: str | None = None
    suggestion: str | None = None

    def describe(self) -> str:
        """`memory.recentDay: not a setting; did you mean `memory.recentDays`?`, or
        `memory.recentDays: "seven" is refused: it takes a whole number from 0 to 365`."""
        text = f"{self.key}: {self.problem}"
        if self.accepts is not None:
            text += f": it takes {self.accepts}"
        if self.suggestion is not None:
            text += f"; did you mean {self.suggestion}?"
        return text


def quoted(value: object) -> str:
    """A value as JSON, cut to a readable length."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_QUOTED_CHARS else text[: MAX_QUOTED_CHARS - 1] + "…"


# -- a file read by hand-editing people ------------------------------------------------------------


class InvalidJsonFile(ValueError):
    """A settings file that is not a JSON object; the message names the file, the place and the slip."""


def read_settings_text(path: Path) -> str:
    """The text of a settings file; `InvalidJsonFile` naming the line of a byte that is not UTF-8 (an editor that
    saved it in a local encoding). `OSError` as `Path.read_bytes` raises it."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InvalidJsonFile(
            f"{path}: line {line} holds bytes that are not UTF-8 (saved in another encoding?); save the file as UTF-8"
        ) from error


def read_json_object(text: str, source: Path | str) -> dict[str, Any]:
    """The JSON object `text` holds; `InvalidJsonFile` naming the line, the column and, for the slips of a
    hand edit (a comma after the last entry, a comment, single quotes, an empty file), the slip itself.

    A byte order mark (what some Windows editors put first) is read past, as JSON allows a parser to."""
    text = text.removeprefix(BYTE_ORDER_MARK)
    if not text.strip():
        raise InvalidJsonFile(f"{source}: the file is empty (an empty object, {{}}, means the shipped defaults)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidJsonFile(
            f"{source}: invalid JSON at line {error.lineno} column {error.colno}: {_json_slip(error)}"
        ) from error
    if not isinstance(data, dict):
        raise InvalidJsonFile(f"{source}: (top level): expected a JSON object")
    return data


def repeated_keys(text: str) -> list[tuple[tuple[str, ...], list[Any]]]:
    """The keys a JSON object's text gives more than once (where JSON keeps the last without a word), each with
    its values in file order; objects inside lists are not looked into. `text` must be valid JSON."""
    repeats: list[tuple[dict[str, Any], str, list[Any]]] = []

    def collect(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        values: dict[str, list[Any]] = {}
        for key, value in pairs:
            values.setdefault(key, []).append(value)
            found[key] = value
        repeats.extend((found, key, given) for key, given in values.items() if len(given) > 1)
        return found

    data = json.loads(text.removeprefix(BYTE_ORDER_MARK), object_pairs_hook=collect)
    paths: dict[int, tuple[str, ...]] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            paths[id(node)] = path
            for key, value in node.items():
                walk(value, (*path, key))

    walk(data, ())
    return [((*paths[id(holder)], key), given) for holder, key, given in repeats if id(holder) in paths]


def _json_slip(error: json.JSONDecodeError) -> str:
    """What a person most likely typed where the parser stopped, in words; the parser's own message otherwise."""
    here = error.doc[error.pos :]
    before = error.doc[: error.pos].rstrip()
    if here.startswith(("//", "/*", "#")):
        return f"a comment ({here[:2].strip()}): JSON takes none; remove it, or keep the note in a key of its own"
    if before.endswith(",") and here[:1] in ("}", "]"):
        return f"a comma after the last entry: JSON takes none before `{here[0]}`; remove it"
    if here.startswith("'"):
        return "single quotes: JSON takes double quotes around keys and texts"
    return error.msg


# -- what a field accepts ---------------------------------------------------------------------------


def _without_none(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) < len(get_args(annotation)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return annotation, False


def _bounds(field: FieldInfo) -> str:
    low = high = ""
    for rule in field.metadata:
        if isinstance(rule, Ge):
            low = f"{rule.ge}"
        elif isinstance(rule, Gt):
            low = f"above {rule.gt}"
        elif isinstance(rule, Le):
            high = f"{rule.le}"
        elif isinstance(rule, Lt):
            high = f"below {rule.lt}"
    if low and high:
        return f" from {low} to {high}" if not low.startswith("above") else f" {low}, up to {high}"
    if low:
        return f" of at least {low}" if not low.startswith("above") else f" {low}"
    if high:
        return f" up to {high}"
    return ""


def _kind(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(quoted(option) for option in get_args(annotation))
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a text"
    if get_origin(annotation) is list:
        return f"a list of {_plural(get_args(annotation)[0])}"
    if get_origin(annotation) is dict:
        return f"an object of {_plural(get_args(annotation)[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "an object of the section's keys"
    return str(annotation)


def _plural(annotation: Any) -> str:
    return {int: "whole numbers", float: "numbers", str: "texts", bool: "true or false values"}.get(
        annotation, "server entries (`command` or `url`)"
    )


def accepted(field: FieldInfo) -> str:
    """What a field accepts, in words: `a whole number from 0 to 365`, `one of "polling", "webhook"`."""
    annotation, optional = _without_none(field.annotation)
    text = _kind(annotation)
    if annotation in (int, float):
        text += _bounds(field)
    return text + (", or null" if optional else "")


def literal_options(field: FieldInfo) -> list[object]:
    annotation, _ = _without_none(field.annotation)
    return list(get_args(annotation)) if get_origin(annotation) is Literal else []


def nearest_value(field: FieldInfo, value: object) -> object | None:
    """The valid value closest to `value`, when one is plain: a close option, a bound, a number in a text."""
    annotation, _ = _without_none(field.annotation)
    options = literal_options(field)
    if options:
        found = difflib.get_close_matches(str(value).lower(), [str(o) for o in options], 1, SUGGESTION_CUTOFF)
        return next((o for o in options if str(o) == found[0]), None) if found else None
    if annotation is bool and isinstance(value, (int, str)):
        return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(str(value).lower())
    if annotation in (int, float) and not isinstance(value, bool):
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                return None
        elif isinstance(value, (int, float)):
            number = float(value)
        else:
            return None
        for rule in field.metadata:
            if isinstance(rule, Ge) and number < float(rule.ge):  # type: ignore[arg-type]
                number = float(rule.ge)  # type: ignore[arg-type]
            elif isinstance(rule, Le) and number > float(rule.le):  # type: ignore[arg-type]
                number = float(rule.le)  # type: ignore[arg-type]
        if number.is_integer():
            return int(number)
        return None if annotation is int else number
    return None


# -- where a key of runtime-config.json leads -------------------------------------------------------


def _model_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def field_at(path: tuple[str, ...]) -> FieldInfo | None:
    """The field a runtime-config key names (`("memory", "recentDays")`), or None for an unknown key."""
    model: type[BaseModel] = RuntimeConfig
    index = 0
    while index < len(path):
        field = _model_fields(model).get(path[index])
        index += 1
        if field is None or index == len(path):
            return field
        annotation, entry = field.annotation, _entry_model(field.annotation)
        if isinstance(annotation, type) and issubclass(annotation, ConfigSection):
            model = annotation
        elif entry is not None and index + 1 < len(path):
            model, index = entry, index + 1  # past the server's name
        else:
            return None
    return None


def _entry_model(annotation: Any) -> type[BaseModel] | None:
    value = get_args(annotation)[1] if get_origin(annotation) is dict else None
    return value if isinstance(value, type) and issubclass(value, BaseModel) else None


def _keys_beside(path: tuple[str, ...]) -> list[str]:
    """The valid keys of the object that holds `path[-1]`."""
    parent = path[:-1]
    if not parent:
        return list(_model_fields(RuntimeConfig))
    field = field_at(parent)
    if field is not None and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
        return list(_model_fields(field.annotation))
    if len(parent) >= 2:
        holder = field_at(parent[:-1])
        entry = _entry_model(holder.annotation) if holder is not None else None
        if entry is not None:
            return list(_model_fields(entry))
    return []


def nearest_key(path: tuple[str, ...]) -> str | None:
    """The valid key closest to an unknown one: first beside it, then anywhere (`memory.keepLastMessages`
    finds `compaction.keepLastMessages`)."""
    beside = difflib.get_close_matches(path[-1], _keys_beside(path), 1, SUGGESTION_CUTOFF)
    if beside:
        return ".".join((*path[:-1], beside[0]))
    everywhere = [key for key, _, _ in settings_of()]
    found = difflib.get_close_matches(".".join(path), everywhere, 1, SUGGESTION_CUTOFF)
    if found:
        return found[0]
    by_last = {key.rsplit(".", 1)[-1]: key for key in everywhere}
    found = difflib.get_close_matches(path[-1], list(by_last), 1, SUGGESTION_CUTOFF)
    return by_last[found[0]] if found else None


def problem_for(path: tuple[str, ...], error: ErrorDetails) -> ConfigProblem:
    """The problem a pydantic error found at `path` (the key refused), in words a person can act on."""
    key = ".".join(path)
    if error["type"] == "extra_forbidden":
        unknown = tuple(str(p) for p in error["loc"])
        suggestion = nearest_key(unknown)
        what = "not a setting" if unknown == path else f"`{'.'.join(unknown)}` is not a setting"
        if suggestion is None and _keys_beside(unknown):  # nothing close: the keys that are there
            holder = f"`{'.'.join(unknown[:-1])}`" if len(unknown) > 1 else "the file"
            what += f" ({holder} has {', '.join(_keys_beside(unknown))})"
        return ConfigProblem(key, what, suggestion=f"`{suggestion}`" if suggestion else None)
    value = error.get("input")
    full = tuple(str(p) for p in error["loc"] if p != "[key]")
    inside = full[len(path) :]
    # A key inside the refused one (a server entry's `type`) is named itself when it is a setting.
    field = field_at(full) if inside else None
    label = f"`{'.'.join(full)}`: " if field is not None else ""
    if field is None:
        field = field_at(path)
    where = f" (at {'.'.join(inside)})" if inside and not label else ""
    if field is None or error["type"] == "value_error":
        return ConfigProblem(key, _plain_message(error) + where)
    nearest = nearest_value(field, value) if not where else None
    return ConfigProblem(
        key,
        f"{label}{quoted(value)} is refused{where}",
        accepts=accepted(field),
        suggestion=f"`{quoted(nearest)}`" if nearest is not None and quoted(nearest) != quoted(value) else None,
    )


def _plain_message(error: ErrorDetails) -> str:
    message = error["msg"]
    return message.removeprefix("Value error, ")

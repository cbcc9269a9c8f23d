"""The settings page: a form built from the settings model (`bot.settings.settings_of`), each setting
marked live or read at start, that writes the changed keys into the workspace's `runtime-config.json`
after checking them the way the bot checks the file (`parse_runtime_config`); a refused value is named
with the reason and nothing is written. `mcpServers` is left out: its entries may carry credentials."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

from aiohttp import web
from pydantic.fields import FieldInfo

from bot.console.html import esc, form
from bot.console.server import Visit, back_to, notes_of
from bot.runtime_config import InvalidRuntimeConfig, RuntimeConfigStore, parse_runtime_config
from bot.settings import READ_AT_START, RuntimeConfig, settings_of
from bot.shipped import shipped_path

HIDDEN_SECTIONS = ("mcpServers",)


def editable_settings() -> list[tuple[str, FieldInfo]]:
    return [(key, field) for key, _, field in settings_of(RuntimeConfig) if not key.startswith(HIDDEN_SECTIONS)]


def _value_at(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _set_at(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def choices_of(field: FieldInfo) -> list[str | None] | None:
    """The values a setting takes when they are a fixed few (a `Literal`, maybe or `None`); None otherwise."""
    annotation = field.annotation
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    found: list[str | None] = []
    for member in members:
        if member is NoneType:
            found.append(None)
        elif get_origin(member) is Literal:
            found.extend(str(choice) for choice in get_args(member))
        else:
            return None
    return found


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _parsed(raw: str, current: Any, field: FieldInfo) -> Any:
    """A posted value as JSON would hold it: text for a text setting, else JSON (a number, a list, null)."""
    choices = choices_of(field)
    if choices is not None:
        return None if raw == "" and None in choices else raw
    if isinstance(current, str):
        return raw
    raw = raw.strip()
    if raw == "" and current is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class SettingsPage:
    config_store: RuntimeConfigStore

    async def show(
        self, visit: Visit, problems: dict[str, str] | None = None, posted: dict[str, str] | None = None
    ) -> web.Response:
        current = (await self.config_store.current()).model_dump(mode="json", by_alias=True)
        problems = problems or {}
        rows: list[str] = []
        section = ""
        for key, field in editable_settings():
            head = key.split(".")[0]
            if head != section:
                section = head
                rows.append(f"<h2>{esc(section)}</h2>")
            value = posted[key] if posted and key in posted else _shown(_value_at(current, key))
            restart = field.json_schema_extra == READ_AT_START
            badge = '<span class="restart">restart</span>' if restart else '<span class="live">live</span>'
            name = f'name="{esc(key)}" id="{esc(key)}"'
            choices = choices_of(field)
            if choices is not None:
                options = "".join(
                    f'<option value="{esc(choice or "")}"{" selected" if value == _shown(choice) else ""}>'
                    f"{esc(choice if choice is not None else '(none)')}</option>"
                    for choice in choices
                )
                widget = f"<select {name}>{options}</select>"
            elif isinstance(_value_at(current, key), bool):
                options = "".join(
                    f'<option value="{choice}"{" selected" if value == choice else ""}>{choice}</option>'
                    for choice in ("true", "false")
                )
                widget = f"<select {name}>{options}</select>"
            elif len(value) > 60 or value.startswith(("[", "{")):
                widget = f'<textarea {name} rows="2">{esc(value)}</textarea>'
            else:
                widget = f'<input {name} value="{esc(value)}">'
            error = f'<p class="error" role="alert">{esc(problems[key])}</p>' if key in problems else ""
            rows.append(
                f'<div class="setting{" refused" if error else ""}">'
                f'<label for="{esc(key)}"><code>{esc(key)}</code> {badge}</label>'
                f"{widget}<small>{esc(field.description or '')}</small>{error}</div>"
            )
        body = notes_of(visit.request)
        if problems:
            body += '<p class="error" role="alert">Nothing was written: ' + esc("; ".join(problems.values())) + "</p>"
        body += form("settings", "".join(rows), visit.csrf, "Save settings", css="settings")
        return visit.page("Settings", body)

    async def save(self, visit: Visit) -> web.StreamResponse:
        in_force = await self.config_store.current()
        current = in_force.model_dump(mode="json", by_alias=True)
        changed: dict[str, Any] = {}
        for key, field in editable_settings():
            if key not in visit.form:
                continue
            value = _parsed(visit.form[key], _value_at(current, key), field)
            if value != _value_at(current, key):
                changed[key] = value
        if not changed:
            back_to("settings", note="Nothing changed.")
        changes: dict[str, Any] = {}
        for key, value in changed.items():
            _set_at(changes, key, value)
        defaults = json.loads((shipped_path("config") / "runtime-config.json").read_text("utf-8"))
        try:
            # A file the bot cannot read as an object (a slip of a hand edit) is the person's text: not written over.
            text = self.config_store.with_changes(changes)
            loaded = parse_runtime_config(text, self.config_store.source(), defaults, in_force=in_force)
        except InvalidRuntimeConfig as error:
            return await self.show(visit, {"": f"{error}; fix it by hand first"}, visit.form)
        refused = {problem.key: problem.describe() for problem in loaded.problems if problem.key in changed}
        if refused:
            return await self.show(visit, refused, visit.form)
        await self.config_store.write(text)  # applied now: the next page shows the new values in force
        back_to(
            "settings", note="Saved: " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in changed.items())
        )

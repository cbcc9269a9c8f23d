"""`bot.config_problems` on its own: a refused setting said so that a person can fix it (the key, the
fault, what it takes, the nearest valid key or value)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from bot.config_problems import (
    MAX_QUOTED_CHARS,
    ConfigProblem,
    accepted,
    field_at,
    nearest_key,
    nearest_value,
    problem_for,
    quoted,
)
from bot.settings import EnvSettings, RuntimeConfig


def said(document: dict[str, Any], key: tuple[str, ...]) -> list[str]:
    """What the owner reads for each error of `document`, refused at `key`."""
    try:
        RuntimeConfig.model_validate(document)
    except ValidationError as error:
        return [problem_for(key, item).describe() for item in error.errors()]
    raise AssertionError(f"{document} was accepted")


def test_a_wrong_value_says_what_the_key_takes_and_the_nearest_valid_value() -> None:
    assert said({"memory": {"recentDays": "seven"}}, ("memory", "recentDays")) == [
        'memory.recentDays: "seven" is refused: it takes a whole number from 0 to 365'
    ]
    assert said({"memory": {"recentDays": 900}}, ("memory", "recentDays")) == [
        "memory.recentDays: 900 is refused: it takes a whole number from 0 to 365; did you mean `365`?"
    ]
    assert said({"memory": {"enabled": "yes"}}, ("memory", "enabled")) == [
        'memory.enabled: "yes" is refused: it takes true or false; did you mean `true`?'
    ]


def test_an_unknown_key_is_matched_beside_it_then_anywhere_else_the_keys_there_are_listed() -> None:
    assert said({"memory": {"recentDay": 3}}, ("memory", "recentDay")) == [
        "memory.recentDay: not a setting; did you mean `memory.recentDays`?"
    ]
    assert said({"memory": {"keepLastMessages": 3}}, ("memory", "keepLastMessages")) == [
        "memory.keepLastMessages: not a setting; did you mean `compaction.keepLastMessages`?"
    ]
    [listed] = said({"memory": {"zzzzqqq": 1}}, ("memory", "zzzzqqq"))
    assert listed.startswith("memory.zzzzqqq: not a setting (`memory` has enabled, scope, ")
    assert nearest_key(("mcpServers", "files", "comand")) == "mcpServers.files.command"  # past the server's name


def test_a_key_inside_a_server_entry_is_named_itself() -> None:
    [line] = said({"mcpServers": {"x": {"type": "ftp", "url": "http://x"}}}, ("mcpServers",))
    assert line.startswith('mcpServers: `mcpServers.x.type`: "ftp" is refused: it takes one of "stdio", "http"')


def test_a_validators_own_message_is_kept() -> None:
    assert said({"scheduler": {"maintenanceCron": "bad cron"}}, ("scheduler", "maintenanceCron")) == [
        "scheduler.maintenanceCron: 'bad cron' is not a 5-field cron expression like '0 9 * * 1-5'"
    ]


def test_what_an_environment_field_accepts_and_the_nearest_value() -> None:
    mode, port = EnvSettings.model_fields["telegram_mode"], EnvSettings.model_fields["bot_listen_port"]
    assert accepted(mode) == 'one of "polling", "webhook"' and nearest_value(mode, "Poll") == "polling"
    assert nearest_value(mode, "carrier-pigeon") is None
    assert accepted(port) == "a whole number from 0 to 65535, or null"
    assert nearest_value(port, "70000") == 65535 and nearest_value(port, " 80 ") == 80
    assert nearest_value(port, "http") is None and nearest_value(port, "80.5") is None  # no whole number near


def test_field_lookup_and_quoting() -> None:
    field = field_at(("memory", "recentDays"))
    assert field is not None and field.default == 7
    assert field_at(("memory", "nope")) is None and field_at(("nope",)) is None
    assert quoted("x") == '"x"' and quoted({1, 2}).startswith("{")  # not JSON: shown as Python writes it
    assert len(quoted("x" * 500)) == MAX_QUOTED_CHARS and quoted("x" * 500).endswith("…")
    assert ConfigProblem("a.b", "not a setting").describe() == "a.b: not a setting"

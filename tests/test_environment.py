"""`read_environment` on its own: every variable the bot cannot use is named on a line of its own, with
what it takes; nothing is created while checking."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.environment import InvalidEnvironment, read_environment, workspace_problem


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("BOT_", "TELEGRAM_", "OPENAI_", "LIGHTRAG_", "BRAVE_", "TAVILY_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("BOT_WORKSPACE", str(tmp_path / "workspace"))


def lines_of(env_file: Path | None = None) -> list[str]:
    with pytest.raises(InvalidEnvironment) as raised:
        read_environment(env_file)
    return raised.value.lines


def test_a_usable_environment_is_read_and_nothing_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_MODE", "webhook")
    env = read_environment(None)
    assert env.telegram_mode == "webhook" and env.bot_workspace == tmp_path / "workspace"
    assert not (tmp_path / "workspace").exists()


def test_every_bad_variable_gets_its_own_line_with_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_MODE", "poll")
    monkeypatch.setenv("BOT_LISTEN_PORT", "http")
    lines = lines_of()
    assert len(lines) == 2
    assert 'Invalid environment: TELEGRAM_MODE="poll": it takes one of "polling", "webhook"' in lines[0]
    assert 'did you mean "polling"?' in lines[0]
    assert lines[1].startswith('Invalid environment: BOT_LISTEN_PORT="http": it takes a whole number')


def test_a_value_from_the_env_file_is_read_and_checked_like_the_environment(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("BOT_LOG_LEVEL=loud\n")
    [line] = lines_of(env_file)
    assert line.startswith('Invalid environment: BOT_LOG_LEVEL="loud"') and "DEBUG, INFO" in line
    env_file.write_text("BOT_LOG_LEVEL=DEBUG\n")
    assert read_environment(env_file).bot_log_level == "DEBUG"


def test_a_url_without_its_scheme_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:11434")
    [line] = lines_of()
    assert line == (
        'Invalid environment: OPENAI_BASE_URL="localhost:11434": it takes a URL that starts with http:// or https://'
    )


def test_a_variable_set_empty_is_taken_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # docker compose passes `${VAR:-}` as an empty string for what .env leaves out
    for variable in ("OPENAI_BASE_URL", "TELEGRAM_WEBHOOK_URL", "TELEGRAM_BOT_TOKEN", "BOT_MODEL", "BOT_LISTEN_PORT"):
        monkeypatch.setenv(variable, "")
    env = read_environment(None)
    assert env.openai_base_url is None and env.telegram_webhook_url is None and env.telegram_bot_token is None
    assert env.bot_model is None and env.bot_listen_port is None


def test_a_time_zone_and_a_workspace_the_bot_cannot_use_are_named_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("BOT_TIMEZONE", "Mars/Olympus")
    monkeypatch.setenv("BOT_WORKSPACE", str(tmp_path / "a-file" / "workspace"))
    timezone, workspace = lines_of()
    assert timezone.startswith('Invalid environment: BOT_TIMEZONE="Mars/Olympus": it takes a time zone name')
    assert workspace.startswith("Invalid environment: BOT_WORKSPACE=") and "is a file, not a folder" in workspace


def test_workspace_problems(tmp_path: Path) -> None:
    assert workspace_problem(tmp_path / "new" / "deeper") is None
    assert workspace_problem(tmp_path) is None
    (tmp_path / "file").write_text("x")
    assert workspace_problem(tmp_path / "file") == f"{tmp_path / 'file'} exists and is not a folder"

"""The README stays true: its commands are the ones CI runs, and every configuration key is documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.settings import RuntimeConfig, read_at_start_keys, settings_of

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_runtime_config_key_is_documented() -> None:
    missing = [key for key, _, _ in settings_of() if f"`{key}`" not in README]
    assert missing == []


def test_the_readme_shows_each_setting_with_the_models_default() -> None:
    defaults = RuntimeConfig().model_dump(mode="json", by_alias=True)
    for key, _, _ in settings_of():
        row = re.search(rf"^\| `{re.escape(key)}` \| `([^`]*)` \|", README, re.MULTILINE)
        assert row is not None, f"no table row for {key}"
        default: object = defaults
        for part in key.split("."):
            assert isinstance(default, dict)
            default = default[part]
        assert json.loads(row.group(1)) == default, key


def test_the_readme_marks_restart_exactly_the_settings_read_at_start() -> None:
    marked = set(re.findall(r"^\| `([\w.]+)` \|.*\*\*restart\*\*", README, re.MULTILINE))
    assert marked == set(read_at_start_keys())


def test_the_readme_has_no_unfinished_parts() -> None:
    assert not re.search(r"[A-Z_]+_PLACEHOLDER|TODO|TBD", README)


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.DOTALL)
    setup_and_run, setup_and_test = commands[0], commands[1]
    assert setup_and_run.endswith("python -m bot run")
    assert setup_and_test in (ROOT / ".ci" / "run").read_text()

"""The schema, the docs' key tables and the settings model agree; a workspace's file may name the schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from bot.runtime_config import RuntimeConfigStore
from bot.settings import EnvSettings, McpServerConfig, RuntimeConfig, read_at_start_keys, settings_of
from bot.settings_docs import (
    runtime_config_schema,
    runtime_config_schema_json,
    shipped_schema_path,
    with_tables,
)
from bot.setup.workspace import prepare_workspace
from bot.shipped import shipped_path

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATION = ROOT / "docs" / "configuration.md"


def _schema_property(schema: dict[str, object], key: str) -> dict[str, object]:
    """The schema of the setting at the dotted camelCase `key`, following `$ref`s into `$defs`."""
    definitions = schema["$defs"]
    assert isinstance(definitions, dict)
    node: dict[str, object] = schema
    for part in key.split("."):
        properties = node["properties"]
        assert isinstance(properties, dict)
        node = properties[part]
        ref = node.get("$ref")
        if isinstance(ref, str):
            node = definitions[ref.rsplit("/", 1)[-1]]
    return node


def test_every_setting_has_a_description_in_the_model() -> None:
    assert [key for key, _, field in settings_of() if not field.description] == []
    assert [name for name, field in EnvSettings.model_fields.items() if not field.description] == []
    assert [name for name, field in McpServerConfig.model_fields.items() if not field.description] == []


def test_the_shipped_schema_is_the_model_written_out() -> None:
    assert shipped_schema_path().read_text() == runtime_config_schema_json(), "run python -m bot.settings_docs"


def test_the_schema_gives_each_key_its_description_default_and_whether_it_applies_live() -> None:
    schema = runtime_config_schema()
    restart = set(read_at_start_keys())
    for key, _, field in settings_of():
        prop = _schema_property(schema, key)
        assert field.description is not None
        assert str(prop["description"]).startswith(field.description), key
        assert prop["x-appliesLive"] is (key not in restart), key
        assert "default" in prop, key
    assert _schema_property(schema, "memory.recentDays")["default"] == 7
    assert _schema_property(schema, "rag.backend")["x-appliesLive"] is False
    assert _schema_property(schema, "scheduler.maintenanceCron")["x-appliesLive"] is True


def test_the_docs_tables_are_the_model_written_out() -> None:
    document = CONFIGURATION.read_text()
    assert with_tables(document) == document, "run python -m bot.settings_docs"
    defaults = RuntimeConfig().model_dump(mode="json", by_alias=True)
    for key, _, _field in settings_of():
        row = re.search(rf"^\| `{re.escape(key)}` \| `([^`]*)` \| (live|\*\*restart\*\*) \| (.*) \|$", document, re.M)
        assert row is not None, key
        default: object = defaults
        for part in key.split("."):
            assert isinstance(default, dict)
            default = default[part]
        assert json.loads(row.group(1)) == default, key
        assert (row.group(2) == "**restart**") is (key in read_at_start_keys()), key
    for name in EnvSettings.model_fields:
        assert f"| `{name.upper()}` |" in document


def test_a_new_workspace_file_names_the_shipped_schema_and_the_bot_accepts_it(tmp_path: Path) -> None:
    workspace = prepare_workspace(EnvSettings(bot_workspace=tmp_path / "workspace"))
    written = json.loads(workspace.runtime_config_file.read_text())
    assert list(written) == ["$schema"]
    schema_file = Path(unquote(urlparse(written["$schema"]).path))
    assert schema_file == shipped_schema_path()
    assert json.loads(schema_file.read_text())["title"] == "runtime-config.json"

    workspace.runtime_config_file.write_text(json.dumps({**written, "memory": {"recentDays": 3}}))
    store = RuntimeConfigStore(shipped_path("config") / "runtime-config.json", workspace.runtime_config_file)
    assert store.load_now().memory.recent_days == 3


def test_a_workspace_file_kept_from_before_is_not_rewritten(tmp_path: Path) -> None:
    mine = '{"memory": {"recentDays": 2}}'
    (tmp_path / "preferences").mkdir(parents=True)
    (tmp_path / "preferences" / "runtime-config.json").write_text(mine)
    prepare_workspace(EnvSettings(bot_workspace=tmp_path))
    assert (tmp_path / "preferences" / "runtime-config.json").read_text() == mine

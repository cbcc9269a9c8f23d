"""runtime-config.json: defaults, partial files merged over them, hot reload, refusal of bad files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from bot.runtime_config import RuntimeConfigStore
from bot.settings import RuntimeConfig, settings_of, shipped_runtime_config_json
from bot.shipped import shipped_path

SHIPPED_DEFAULTS = shipped_path("config") / "runtime-config.json"


def store_at(tmp_path: Path) -> RuntimeConfigStore:
    return RuntimeConfigStore(SHIPPED_DEFAULTS, tmp_path / "runtime-config.json")


def write(path: Path, content: str) -> None:
    path.write_text(content, encoding="utf-8")
    # Make every write visible to the change check even within one filesystem timestamp tick.
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_shipped_defaults_are_the_contract_defaults() -> None:
    """CONTRACT's keys keep CONTRACT's defaults; the sections may have more keys (README documents them)."""
    shipped = json.loads(SHIPPED_DEFAULTS.read_text())
    contract: dict[str, dict[str, object]] = {
        "memory": {
            "enabled": True, "recentDays": 7, "softPromptBudgetTokens": 1800, "maxPromptBudgetTokens": 3500,
            "workingTopK": 6, "episodicTopK": 8, "semanticTopK": 6, "proceduralTopK": 4, "promotionEnabled": True,
            "promotionMinConfidence": 0.75, "decayEnabled": True, "decayDays": 30,
            "codeAwareExtractionEnabled": True, "legacyDailyNotesEnabled": True,
        },
        "compaction": {"enabled": True, "maxContextTokens": 50000, "keepLastMessages": 20},
        "access": {"allowedUsers": []},
    }  # fmt: skip
    for section, keys in contract.items():
        assert {key: shipped[section][key] for key in keys} == keys
    # The model's own defaults agree with the shipped file, so a missing key means the same thing.
    assert RuntimeConfig.model_validate(shipped) == RuntimeConfig()


def test_the_shipped_file_is_the_settings_model_written_out() -> None:
    """The defaults live in one place, the model: the shipped file holds every setting with the model's
    default and nothing else (`scripts/write-runtime-config.sh` rewrites it after a change to the model)."""
    shipped = json.loads(SHIPPED_DEFAULTS.read_text())
    model_keys = {key for key, _, _ in settings_of()}

    def keys_of(section: dict[str, object], prefix: str = "") -> set[str]:
        found: set[str] = set()
        for key, value in section.items():
            if isinstance(value, dict) and key != "mcpServers":  # a section, not a setting whose value is an object
                found |= keys_of(value, f"{prefix}{key}.")
            else:
                found.add(prefix + key)
        return found

    assert keys_of(shipped) == model_keys
    assert SHIPPED_DEFAULTS.read_text() == shipped_runtime_config_json(), "run scripts/write-runtime-config.sh"


async def test_missing_workspace_file_means_shipped_defaults(tmp_path: Path) -> None:
    config = await store_at(tmp_path).current()
    assert config.memory.recent_days == 7
    assert config.compaction.keep_last_messages == 20


async def test_partial_file_is_merged_key_by_key(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 3}, "access": {"allowedUsers": [42]}}))
    config = await store.current()
    assert config.memory.recent_days == 3
    assert config.memory.soft_prompt_budget_tokens == 1800  # untouched keys keep their defaults
    assert config.access.allowed_users == [42]


async def test_edit_takes_effect_on_next_read(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"compaction": {"keepLastMessages": 5}}))
    assert (await store.current()).compaction.keep_last_messages == 5
    write(store.path, json.dumps({"compaction": {"keepLastMessages": 9}}))
    assert (await store.current()).compaction.keep_last_messages == 9
    store.path.unlink()
    assert (await store.current()).compaction.keep_last_messages == 20


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"memory": {"recentDays": "seven"}}', "memory.recentDays"),
        ('{"memory": {"recentDays": "7"}}', "memory.recentDays"),
        ('{"memory": {"enabled": 1}}', "memory.enabled"),
        ('{"compaction": {"keepLastMesages": 5}}', "compaction.keepLastMesages"),
        ('{"surprise": {}}', "surprise"),
        ('{"memory": {"recentDays": 3,}}', "invalid JSON at line 1"),
        ("[1, 2]", "expected a JSON object"),
        ('{"memory": {"recentDays": -1}}', "memory.recentDays"),
    ],
)
async def test_invalid_file_is_refused_with_one_line_and_last_good_config_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, named: str
) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 2}}))
    assert (await store.current()).memory.recent_days == 2

    write(store.path, content)
    with caplog.at_level(logging.ERROR):
        config = await store.current()
        await store.current()  # asking again does not log again
    assert config.memory.recent_days == 2
    refusals = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert len(refusals) == 1
    assert str(store.path) in refusals[0] and named in refusals[0]


async def test_a_fixed_file_is_taken_again(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    write(store.path, "{not json")
    assert (await store.current()).memory.recent_days == 7
    write(store.path, json.dumps({"memory": {"recentDays": 1}}))
    assert (await store.current()).memory.recent_days == 1


def test_float_keys_accept_integers(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"promotionMinConfidence": 1}, "llm": {"temperature": 0}}))
    config = store.load_now()
    assert config.memory.promotion_min_confidence == 1.0
    assert config.llm.temperature == 0.0


async def test_changing_a_setting_read_at_start_says_it_waits_for_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_at(tmp_path)
    await store.current()
    with caplog.at_level(logging.WARNING):
        write(store.path, json.dumps({"scheduler": {"maintenanceCron": "0 4 * * *"}, "memory": {"recentDays": 3}}))
        config = await store.current()
    assert config.scheduler.maintenance_cron == "0 4 * * *"  # in force for whatever reads it later
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "scheduler.maintenanceCron changed" in warnings[0] and "after a restart" in warnings[0]

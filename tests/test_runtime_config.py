"""runtime-config.json: defaults, partial files merged over them, hot reload, refusal of bad files."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bot.notices import OwnerNotices
from bot.runtime_config import InvalidRuntimeConfig, RuntimeConfigStore, deep_merge, runtime_config_problems
from bot.settings import RuntimeConfig, settings_of, shipped_runtime_config_json
from bot.shipped import shipped_path
from tests.channels.telegram_harness import OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.telegram_server import FakeTelegram

SHIPPED_DEFAULTS = shipped_path("config") / "runtime-config.json"


def store_at(tmp_path: Path) -> RuntimeConfigStore:
    return RuntimeConfigStore(SHIPPED_DEFAULTS, tmp_path / "runtime-config.json")


def store_telling_the_owner(
    tmp_path: Path,
) -> tuple[RuntimeConfigStore, OwnerNotices, list[str], Callable[[str], Awaitable[bool]]]:
    """A store whose owner notices are delivered into the list returned (`deliver` connects them again)."""
    notices = OwnerNotices(tmp_path / "told.json")
    told: list[str] = []

    async def deliver(text: str) -> bool:
        told.append(text)
        return True

    notices.connect(deliver)
    store = RuntimeConfigStore(SHIPPED_DEFAULTS, tmp_path / "runtime-config.json", notices=notices)
    return store, notices, told, deliver


def write(path: Path, content: str) -> None:
    path.write_text(content, encoding="utf-8")
    # Make every write visible to the change check even within one filesystem timestamp tick.
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_shipped_defaults_are_the_contract_defaults() -> None:
    """The documented keys keep their documented defaults; the sections may have more keys (docs/configuration.md)."""
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
        ('{"memory": {"recentDays": 3,}}', "invalid JSON at line 1"),
        ("[1, 2]", "expected a JSON object"),
        # The slips of a hand edit are named as such, not as what the parser expected instead.
        (
            '{"memory": {"recentDays": 3,\n}}',
            "line 2 column 1: a comma after the last entry: JSON takes none before `}`",
        ),
        ('{"access": {"allowedUsers": [1, 2,]}}', "a comma after the last entry: JSON takes none before `]`"),
        ('{\n  // my bot\n  "memory": {}}', "line 2 column 3: a comment (//): JSON takes none"),
        ("{'memory': {}}", "single quotes: JSON takes double quotes"),
        ("", "the file is empty (an empty object, {}, means the shipped defaults)"),
        ("  \n", "the file is empty"),
    ],
)
async def test_a_file_that_is_not_a_json_object_is_refused_whole_and_the_last_good_config_stays(
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
    [problem] = store.problems()
    assert problem.key == "(file)" and named in problem.problem


async def test_a_byte_order_mark_an_editor_put_first_is_read_past(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    store.path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"memory": {"recentDays": 3}}).encode())
    assert (await store.current()).memory.recent_days == 3
    assert store.problems() == [] and runtime_config_problems(store.path) == []


async def test_a_file_saved_in_another_encoding_is_refused_whole_naming_the_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An editor that saved the file as Latin-1 (a name with an é): the line of the first such byte, and the fix."""
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 2}}))
    assert (await store.current()).memory.recent_days == 2
    store.path.write_bytes('{\n  "memory": {"recentDays": 5},\n  "llm": {"model": "caf\u00e9"}\n}\n'.encode("latin-1"))
    with caplog.at_level(logging.ERROR):
        assert (await store.current()).memory.recent_days == 2  # the last good configuration stays
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert str(store.path) in refusal and "line 3" in refusal and "save the file as UTF-8" in refusal
    [problem] = store.problems()
    assert problem.key == "(file)" and "line 3" in problem.problem and "codec" not in problem.problem
    [listed] = runtime_config_problems(store.path)
    assert listed.problem == problem.problem
    with pytest.raises(InvalidRuntimeConfig, match="line 3"):
        store.with_changes({"memory": {"recentDays": 6}})
    assert store.path.read_bytes().endswith('"caf\u00e9"}\n}\n'.encode("latin-1"))  # the person's bytes, untouched


async def test_a_file_the_bot_cannot_even_look_at_is_refused_whole_and_the_bot_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A path `stat` fails on (a symlink loop here; a folder the bot may not enter fails the same way)."""
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 2}}))
    assert (await store.current()).memory.recent_days == 2
    store.path.unlink()
    store.path.symlink_to(store.path)
    with caplog.at_level(logging.ERROR):
        assert (await store.current()).memory.recent_days == 2  # the last good configuration stays
        await store.current()
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert str(store.path) in refusal and "Too many levels of symbolic links" in refusal
    [problem] = store.problems()
    assert problem.key == "(file)" and problem.problem.startswith("cannot be read")
    store.path.unlink()
    write(store.path, json.dumps({"memory": {"recentDays": 4}}))
    assert (await store.current()).memory.recent_days == 4 and store.problems() == []


@pytest.mark.parametrize("content", ['{"memory": {"recentDays": 3,}}', "", "[1]"])
async def test_a_setting_written_by_the_bot_never_replaces_a_file_it_cannot_read(tmp_path: Path, content: str) -> None:
    store = store_at(tmp_path)
    write(store.path, content)
    with pytest.raises(InvalidRuntimeConfig, match=str(store.path)):
        await store.write_settings({"llm": {"model": "qwen2.5:7b"}})
    assert store.path.read_text() == content  # the person's text, as they left it
    store.path.unlink()
    await store.write_settings({"llm": {"model": "qwen2.5:7b"}})  # no file: written from the change alone
    assert json.loads(store.path.read_text()) == {"llm": {"model": "qwen2.5:7b"}}


async def test_the_issues_typo_refuses_that_key_alone_and_names_the_nearest_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"compaction": {"keepLastMessages": 3}, "memory": {"recentDay": 2}}))
    with caplog.at_level(logging.ERROR):
        config = await store.current()
    assert config.compaction.keep_last_messages == 3  # the good key applies
    assert config.memory.recent_days == 7
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert str(store.path) in refusal and "memory.recentDay" in refusal
    assert "did you mean `memory.recentDays`?" in refusal
    assert [problem.key for problem in store.problems()] == ["memory.recentDay"]


# Each bad key sits in a file with good keys beside it: `memory.workingTopK` in the same section and
# `compaction.keepLastMessages` in another. The bad key is refused alone; the log line names the file,
# the key, and the nearest valid key or the values accepted.
@pytest.mark.parametrize(
    ("bad", "key", "said"),
    [
        ({"memory": {"recentDay": 2}}, "memory.recentDay", "did you mean `memory.recentDays`?"),
        ({"memory": {"keepLastMessages": 2}}, "memory.keepLastMessages", "did you mean `compaction.keepLastMessages`?"),
        ({"rag": {"xyz": 1}}, "rag.xyz", "not a setting (`rag` has enabled, backend, postgresVectors, "),
        ({"surprise": {}}, "surprise", "not a setting (the file has memory, compaction, access, "),
        ({"toolloop": {}}, "toolloop", "did you mean `toolLoop`?"),
        ({"memory": {"recentDays": "seven"}}, "memory.recentDays", "it takes a whole number from 0 to 365"),
        ({"memory": {"recentDays": "3"}}, "memory.recentDays", "did you mean `3`?"),
        ({"memory": {"recentDays": 400}}, "memory.recentDays", "from 0 to 365; did you mean `365`?"),
        ({"memory": {"decayEnabled": 1}}, "memory.decayEnabled", "it takes true or false; did you mean `true`?"),
        ({"rag": {"queryMode": "hybird"}}, "rag.queryMode", 'did you mean `"hybrid"`?'),
        ({"access": {"allowedUsers": ["ann"]}}, "access.allowedUsers", "a list of whole numbers"),
        ({"compaction": {"budgetShares": {"memory": 0.9}}}, "compaction.budgetShares", "at most 1"),
        ({"memory": 5}, "memory", "an object of the section's keys"),
    ],
)
async def test_a_bad_key_or_value_is_refused_alone_and_the_other_keys_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: dict[str, object], key: str, said: str
) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 2}, "compaction": {"keepLastMessages": 4}}))
    assert (await store.current()).memory.recent_days == 2

    good = {"memory": {"workingTopK": 3}, "compaction": {"keepLastMessages": 5}}
    content = deep_merge(good, bad) if isinstance(bad.get("memory"), dict) or "memory" not in bad else {**good, **bad}
    write(store.path, json.dumps(content))
    with caplog.at_level(logging.ERROR):
        config = await store.current()
        await store.current()  # asking again does not log again
    assert config.compaction.keep_last_messages == 5
    if key != "memory":
        assert config.memory.working_top_k == 3
    if key.startswith("memory.recentDays"):
        assert config.memory.recent_days == 2  # a refused value keeps the value in force
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert f"Refused {key} in {store.path}:" in refusal and said in refusal, refusal
    assert [problem.key for problem in store.problems()] == [key]
    assert runtime_config_problems(store.path) == store.problems()

    write(store.path, json.dumps(good))  # fixed: nothing in error any more
    assert (await store.current()).memory.working_top_k == 3
    assert store.problems() == []


async def test_a_key_given_twice_is_refused_alone_instead_of_the_last_one_winning_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 2}}))
    assert (await store.current()).memory.recent_days == 2
    write(store.path, '{"memory": {"recentDays": 3, "workingTopK": 4, "recentDays": 30}, "compaction": {}}')
    with caplog.at_level(logging.ERROR):
        config = await store.current()
    assert config.memory.recent_days == 2 and config.memory.working_top_k == 4  # the rest of the file applies
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert f"Refused memory.recentDays in {store.path}: given twice (3, then 30): keep the one you mean" in refusal
    assert runtime_config_problems(store.path) == store.problems()


async def test_a_refused_key_is_told_to_the_owner_once_and_settled_once_fixed(tmp_path: Path) -> None:
    store, notices, told, deliver = store_telling_the_owner(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDay": 2}}))
    await store.current()
    write(store.path, json.dumps({"memory": {"recentDay": 2}, "llm": {"temperature": 0.5}}))
    await store.current()
    await notices.close()
    [notice] = told
    assert str(store.path) in notice and "memory.recentDay" in notice and "`memory.recentDays`" in notice

    write(store.path, json.dumps({"memory": {"recentDays": 2}}))
    await store.current()
    assert notices.keys("runtime-config:") == set()
    write(store.path, json.dumps({"memory": {"recentDay": 2}}))  # the same mistake again is told again
    notices.connect(deliver)
    await store.current()
    await notices.close()
    assert len(told) == 2


async def test_a_file_refused_whole_at_start_says_the_shipped_defaults_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, notices, told, _ = store_telling_the_owner(tmp_path)
    write(store.path, '{"memory": {"recentDays": 3},}')
    with caplog.at_level(logging.ERROR):
        assert store.load_now().memory.recent_days == 7
    [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
    assert refusal.endswith("; keeping the shipped defaults")
    write(store.path, '{"memory": {"recentDays": 3}}')
    assert (await store.current()).memory.recent_days == 3
    write(store.path, '{"memory": {"recentDays": 4},}')
    assert (await store.current()).memory.recent_days == 3
    await notices.close()
    assert [text.rsplit(". ", 1)[-1] for text in told] == [
        "The shipped defaults apply until the file is fixed.",
        "The last good configuration stays in force until the file is fixed.",
    ]
    assert "a comma after the last entry" in told[0]


async def test_an_editor_that_saves_by_renaming_a_new_file_over_it_is_seen(tmp_path: Path) -> None:
    """The new file may have the old one's size and time (an editor that keeps the mtime): its inode differs."""
    store = store_at(tmp_path)
    write(store.path, json.dumps({"memory": {"recentDays": 3}}))
    assert (await store.current()).memory.recent_days == 3
    before = store.path.stat()
    saved = tmp_path / ".runtime-config.json.swp"
    saved.write_text(json.dumps({"memory": {"recentDays": 4}}))
    os.utime(saved, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(saved, store.path)
    assert (await store.current()).memory.recent_days == 4


def test_the_problems_of_a_file_are_listed_without_a_running_bot(tmp_path: Path) -> None:
    path = tmp_path / "runtime-config.json"
    assert runtime_config_problems(path) == []
    path.write_text('{"compaction": {"keepLastMesages": 5}, "telegram": {"deliveryAttempts": 50}}')
    described = [problem.describe() for problem in runtime_config_problems(path)]
    assert described == [
        "compaction.keepLastMesages: not a setting; did you mean `compaction.keepLastMessages`?",
        "telegram.deliveryAttempts: 50 is refused: it takes a whole number from 1 to 20; did you mean `20`?",
    ]
    path.write_text("{oops")
    [problem] = runtime_config_problems(path)
    assert problem.key == "(file)" and "invalid JSON at line 1" in problem.problem


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
        write(store.path, json.dumps({"rag": {"backend": "server"}, "memory": {"recentDays": 3}}))
        config = await store.current()
    assert config.rag.backend == "server"  # in force for whatever reads it later
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "rag.backend changed" in warnings[0] and "after a restart" in warnings[0]


async def test_the_owner_hears_of_a_typo_once_on_telegram_and_status_lists_it_until_fixed(
    start: BotFactory, fake_telegram: FakeTelegram
) -> None:
    bot = await start({"compaction": {"keepLastMessages": 3}, "memory": {"recentDay": 2}})
    assert bot.app.config_store.in_force().compaction.keep_last_messages == 3  # the good key applies

    [notice] = await fake_telegram.await_messages(OWNER)
    # Telegram shows the keys as code: the text arrives without the backticks.
    assert "memory.recentDay" in notice.text and "did you mean memory.recentDays?" in notice.text
    assert "runtime-config.json" in notice.text

    fake_telegram.push_message(OWNER, "/status")
    status = (await fake_telegram.await_messages(OWNER, 2))[-1].text
    assert "Config: 1 refused in" in status
    assert "memory.recentDay: not a setting; did you mean memory.recentDays?" in status

    config_file = bot.workspace / "preferences" / "runtime-config.json"
    fixed = json.loads(config_file.read_text())
    fixed["memory"] = {"recentDays": 2}
    write(config_file, json.dumps(fixed))
    fake_telegram.push_message(OWNER, "/status")
    status = (await fake_telegram.await_messages(OWNER, 3))[-1].text
    assert "Config:" not in status
    assert bot.app.config_store.in_force().memory.recent_days == 2
    # Told once: the owner's chat holds the notice and the two /status replies, nothing more.
    assert len(fake_telegram.sent_messages(OWNER)) == 3

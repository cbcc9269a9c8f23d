"""The setup checks on their own (what `doctor`, `onboard` and `/status` report), in this process, against
the fake model endpoint and the fake Bot API: each failure names what is at fault and its fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from bot.settings import EnvSettings
from bot.setup.checks import (
    CONFIG_CHECK,
    CheckResult,
    cheaper_extraction_model,
    check_environment,
    check_model_call,
    check_model_window,
    check_telegram,
    check_telegram_token,
    check_workspace,
    model_registry,
    read_runtime_config,
)
from tests.channels.telegram_harness import free_port
from tests.conftest import TEST_API_KEY, env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


def env_at(tmp_path: Path, fake_openai: FakeOpenAI, **overrides: Any) -> EnvSettings:
    return env_for(tmp_path / "workspace", fake_openai, **overrides)


def failures(results: list[CheckResult]) -> dict[str, str]:
    return {result.name: result.line() for result in results if not result.ok}


def test_the_environment_checks_name_the_variable_to_set(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    complete = env_at(tmp_path, fake_openai, telegram_bot_token="1:x")
    assert failures(check_environment(complete)) == {}
    bare = env_at(tmp_path, fake_openai, openai_api_key=None, openai_base_url=None, bot_timezone="Mars/Olympus")
    found = failures(check_environment(bare))
    assert set(found) == {"Time zone", "Model key", "Telegram"}
    assert "Fix: set BOT_TIMEZONE" in found["Time zone"] and "Fix: set OPENAI_API_KEY" in found["Model key"]
    assert "Fix: set TELEGRAM_BOT_TOKEN" in found["Telegram"]
    webhook = env_at(tmp_path, fake_openai, telegram_bot_token="1:x", telegram_mode="webhook")
    assert "Fix: set TELEGRAM_WEBHOOK_URL" in failures(check_environment(webhook))["Webhook"]


def test_the_workspace_check_finds_the_folder_that_would_hold_it(tmp_path: Path) -> None:
    fresh = check_workspace(tmp_path / "new" / "workspace")
    assert fresh.ok and "(created at the first start)" in fresh.detail and "writable" in fresh.detail
    (tmp_path / "a-file").write_text("x")
    blocked = check_workspace(tmp_path / "a-file" / "workspace")
    assert (
        not blocked.ok
        and blocked.line() == f"✗ Workspace: {tmp_path / 'a-file'} is not a folder. Fix: set BOT_WORKSPACE to a folder"
    )


def test_the_runtime_config_check_says_which_key_to_correct(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env = env_at(tmp_path, fake_openai, bot_model="from-the-environment")
    config, [absent] = read_runtime_config(env)
    assert absent.ok and "does not exist yet" in absent.detail and config.llm.model == "from-the-environment"
    path = tmp_path / "workspace" / "preferences" / "runtime-config.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"memory": {"recentDays": 3}}')
    config, [accepted] = read_runtime_config(env)
    assert accepted.ok and config.memory.recent_days == 3
    path.write_text('{"memory": {"recentDays": 3, "recentDay": 2}, "compaction": {"keepLastMessages": -1}}')
    config, refused = read_runtime_config(env)
    assert config.memory.recent_days == 3  # the other keys still apply
    assert [result.name for result in refused] == [CONFIG_CHECK, CONFIG_CHECK] and not any(r.ok for r in refused)
    assert any("Fix: correct or remove `memory.recentDay`" in result.line() for result in refused)
    path.write_text("{not json")
    _, [broken] = read_runtime_config(env)
    assert not broken.ok and broken.fix == f"make {path} a valid JSON object"
    path.write_bytes('{\n  "llm": {"model": "caf\u00e9"}\n}'.encode("latin-1"))
    _, [foreign] = read_runtime_config(env)
    assert not foreign.ok and "line 2 holds bytes that are not UTF-8" in foreign.detail
    assert foreign.fix == f"save {path} as UTF-8"
    path.unlink()
    path.symlink_to(path)  # a path the bot cannot even look at (as a folder it may not enter)
    _, [unreadable] = read_runtime_config(env)
    assert not unreadable.ok and "cannot be read" in unreadable.detail and "Too many levels" in unreadable.detail


def test_a_model_missing_from_models_json_is_said_with_the_entry_to_add(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = env_at(tmp_path, fake_openai)
    config, _ = read_runtime_config(env)
    [known] = check_model_window(env, config)
    assert known.ok  # the shipped default model is known
    unknown = config.model_copy(update={"llm": config.llm.model_copy(update={"model": "my-own-model"})})
    [result] = check_model_window(env, unknown)
    assert not result.ok and '"my-own-model": {"maxInputTokens": N' in result.fix


def test_a_mistake_in_models_json_names_the_entry_and_key_and_the_other_entries_apply(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = env_at(tmp_path, fake_openai)
    models_file = tmp_path / "workspace" / "preferences" / "models.json"
    models_file.parent.mkdir(parents=True, exist_ok=True)
    entries = {
        "qwen-small": {"maxInputToken": 4096, "maxOutputTokens": 512},  # a letter short
        "llama-local": {"maxInputTokens": 8192, "maxOutputTokens": 1024},
        "phi-mini": {"maxInputTokens": "4k", "maxOutputTokens": 512},
    }
    models_file.write_bytes(b"\xef\xbb\xbf" + json.dumps({"models": entries, "model": {}}).encode())
    config, _ = read_runtime_config(env)
    local = config.model_copy(update={"llm": config.llm.model_copy(update={"model": "llama-local"})})
    *refused, window = check_model_window(env, local)
    assert window.ok and "llama-local: input 8192 / output 1024 tokens" in window.line()
    assert [result.line() for result in refused] == [
        f"✗ Model window: {models_file}: model: not a key of the file; did you mean `models`? Fix: correct it in "
        f"{models_file}",
        f"✗ Model window: {models_file}: models.qwen-small.maxInputToken: not a key of an entry; did you mean "
        f"`maxInputTokens`? Fix: correct it in {models_file}",
        f'✗ Model window: {models_file}: models.phi-mini.maxInputTokens: "4k" is refused: Input should be a valid '
        f"integer, unable to parse string as an integer. Fix: correct it in {models_file}",
    ]
    models_file.write_text('{"models": {"qwen-small": {"maxInputTokens": 4096, "maxOutputTokens": 512},}}')
    [broken, _] = check_model_window(env, local)
    assert "invalid JSON at line 1 column 76: a comma after the last entry" in broken.line()


async def test_the_model_call_checks_the_endpoint_the_key_and_the_model(tmp_path: Path) -> None:
    with FakeOpenAI(required_api_key=TEST_API_KEY) as fake:
        working = await check_model_call(TEST_API_KEY, fake.base_url, "fake-model")
        assert [result.line() for result in working] == [
            f"✓ Model endpoint: {fake.base_url.rstrip('/')} reachable",
            "✓ Model key: accepted",
            "✓ Model: fake-model answers",
        ]
        [refused] = await check_model_call("sk-wrong-key-000000", fake.base_url, "fake-model")
        assert refused.name == "Model key" and "Fix: set OPENAI_API_KEY" in refused.line()
    [unreachable] = await check_model_call(TEST_API_KEY, f"http://127.0.0.1:{free_port()}/v1", "fake-model")
    assert unreachable.name == "Model endpoint" and "cannot be reached" in unreachable.detail


async def test_a_cheaper_fast_model_is_offered_only_when_the_endpoint_serves_one(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = env_at(tmp_path, fake_openai)
    registry = model_registry(env)
    fake_openai.models = ["gpt-4o", "gpt-4o-mini", "gpt-4.1-nano"]
    assert await cheaper_extraction_model(TEST_API_KEY, fake_openai.base_url, "gpt-4o", registry) == "gpt-4.1-nano"
    assert await cheaper_extraction_model(TEST_API_KEY, fake_openai.base_url, "gpt-4.1-nano", registry) is None
    fake_openai.models = ["gpt-4o", "gpt-4o-mini", "an-unknown-model"]  # none of the fast tier
    assert await cheaper_extraction_model(TEST_API_KEY, fake_openai.base_url, "gpt-4o", registry) is None


async def test_the_telegram_checks_ask_the_bot_api(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    token_check, username = await check_telegram_token(fake_telegram.root, fake_telegram.token)
    assert token_check.ok and username == "test_bot"
    refused, nobody = await check_telegram_token(fake_telegram.root, "999:wrong")
    assert not refused.ok and nobody == "" and "refused by Telegram" in refused.detail
    unreachable, _ = await check_telegram_token(f"http://127.0.0.1:{free_port()}", fake_telegram.token)
    assert not unreachable.ok and "cannot be reached" in unreachable.detail

    async with httpx.AsyncClient() as client:
        url = f"{fake_telegram.root}/bot{fake_telegram.token}/setWebhook"
        assert (await client.post(url, json={"url": "https://example.org/hook"})).json()["ok"]
    env = env_at(
        tmp_path,
        fake_openai,
        telegram_bot_token=fake_telegram.token,
        telegram_api_base_url=fake_telegram.root,
    )
    token, webhook = await check_telegram(env)
    assert (
        token.ok
        and webhook.line() == "✓ Webhook: polling mode; the webhook https://example.org/hook is removed at start"
    )
    assert await check_telegram(env_at(tmp_path, fake_openai)) == []  # no token: nothing to ask

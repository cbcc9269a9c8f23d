"""`python -m bot onboard`: a first set-up through a pseudo-terminal (a real process) and with flags (`main` in the
test's process), each answer checked on the spot against the fake Bot API and the fake model; a wrong token or key
is caught before anything is written."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.command_line import run_main
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.setup.helpers import Terminal, setup_env


def _fresh_env(tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram) -> dict[str, str]:
    """Nothing set up yet: only where the Bot API is (a test server) and the workspace."""
    return setup_env(
        tmp_path / "workspace", fake_openai, fake_telegram,
        OPENAI_BASE_URL="", OPENAI_API_KEY="", TELEGRAM_BOT_TOKEN="", BOT_TIMEZONE="",
    )  # fmt: skip


def _good_flags(fake_openai: FakeOpenAI, fake_telegram: FakeTelegram) -> list[str]:
    """Every answer as a flag, each one the fakes accept (owner 4242), but for the time zone."""
    return [
        "--no-input", "--telegram-token", fake_telegram.token, "--base-url", fake_openai.base_url,
        "--api-key", TEST_API_KEY, "--model", "gpt-4o-mini", "--owner-id", "4242",
    ]  # fmt: skip


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {name: json.loads(value) if value.startswith('"') else value for name, value in pairs}


def test_onboard_with_flags_writes_env_and_workspace_and_doctor_then_passes(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = TEST_API_KEY
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    (tmp_path / ".env").write_text("# my notes\nBRAVE_API_KEY=kept-as-it-was\nOPENAI_API_KEY=old\n")
    flags = [*_good_flags(fake_openai, fake_telegram), "--timezone", "Europe/Berlin"]
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ Telegram token: @test_bot" in result.stdout
    assert "✓ Model: gpt-4o-mini answers" in result.stdout
    assert "python -m bot run" in result.stdout and "https://t.me/test_bot" in result.stdout

    written = _env_file(tmp_path / ".env")
    assert written["TELEGRAM_BOT_TOKEN"] == fake_telegram.token
    assert written["OPENAI_API_KEY"] == TEST_API_KEY and written["OPENAI_BASE_URL"] == fake_openai.base_url
    assert written["BOT_TIMEZONE"] == "Europe/Berlin" and written["BRAVE_API_KEY"] == "kept-as-it-was"
    assert "# my notes" in (tmp_path / ".env").read_text()
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600
    config = json.loads((tmp_path / "workspace" / "preferences" / "runtime-config.json").read_text())
    assert config["access"] == {"allowedUsers": [4242]} and "$schema" in config

    # The written setup is the one `doctor` checks (it reads .env from the working directory).
    bare = {key: value for key, value in env.items() if key not in ("BOT_WORKSPACE",)}
    doctor = run_main(["doctor"], bare, tmp_path)
    assert doctor.returncode == 0, doctor.stdout


def test_a_hand_edited_runtime_config_with_a_slip_is_named_and_nothing_is_written(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = TEST_API_KEY
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    config_file = tmp_path / "workspace" / "preferences" / "runtime-config.json"
    config_file.parent.mkdir(parents=True)
    hand_edit = '{\n  "memory": {"recentDays": 3},\n}\n'
    config_file.write_text(hand_edit)
    flags = [*_good_flags(fake_openai, fake_telegram), "--timezone", "UTC"]
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    slip = f"✗ runtime-config: {config_file}: invalid JSON at line 3 column 1: a comma after the last entry"
    assert slip in result.stderr
    assert "Fix: correct it (or move it away), then run onboard again" in result.stderr
    assert "Nothing was written." in result.stderr
    assert config_file.read_text() == hand_edit and not (tmp_path / ".env").exists()


def test_a_wrong_token_given_as_a_flag_is_caught_and_nothing_is_written(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    flags = ["--no-input", "--telegram-token", "123456:WRONG", "--base-url", fake_openai.base_url, "--owner-id", "1"]
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 1
    assert "✗ Telegram token: refused by Telegram (Unauthorized)" in result.stderr
    assert "Nothing was written." in result.stderr
    assert not (tmp_path / ".env").exists() and not (tmp_path / "workspace").exists()
    assert fake_openai.chat_requests() == [], "the token is checked before anything else is asked"


def test_a_wrong_key_given_as_a_flag_is_caught_and_nothing_is_written(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = TEST_API_KEY
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    flags = [
        "--no-input", "--telegram-token", fake_telegram.token, "--base-url", fake_openai.base_url,
        "--api-key", "sk-not-the-key-000000", "--owner-id", "1",
    ]  # fmt: skip
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 1
    assert "✗ Model key:" in result.stderr and "Fix: set OPENAI_API_KEY" in result.stderr
    assert "sk-not-the-key-000000" not in result.stderr + result.stdout
    assert not (tmp_path / ".env").exists()


def test_onboard_in_a_terminal_asks_again_after_a_wrong_token_and_key_and_pairs_the_owner(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = TEST_API_KEY
    terminal = Terminal(["onboard"], _fresh_env(tmp_path, fake_openai, fake_telegram), tmp_path)
    terminal.expect("Telegram bot token (from @BotFather): ")
    terminal.type("123456:WRONG")
    terminal.expect("✗ Telegram token: refused by Telegram (Unauthorized)")
    terminal.expect("Telegram bot token (from @BotFather): ", timeout=10)
    terminal.type(fake_telegram.token)
    terminal.expect("✓ Telegram token: @test_bot")
    terminal.expect("Model endpoint")
    terminal.type(fake_openai.base_url)
    terminal.expect("API key of the endpoint")
    terminal.type("sk-not-the-key-000000")
    terminal.expect("Chat model [gpt-4o-mini]")
    terminal.type("")
    terminal.expect("✗ Model key:")
    terminal.expect("API key of the endpoint: ", timeout=10)
    terminal.type(TEST_API_KEY)
    terminal.expect("✓ Model: gpt-4o-mini answers")
    terminal.expect("Your Telegram user id")
    terminal.type("")
    terminal.expect("Send this code to @test_bot on Telegram now: ")
    code = terminal.expect("\n", timeout=5).strip()
    fake_telegram.push_message(777, "hello?")  # not the code: ignored
    fake_telegram.push_message(777, code, username="the_owner")
    terminal.expect("✓ Owner: @the_owner (Telegram user 777)")
    terminal.expect("Time zone")
    terminal.type("Mars/Olympus")
    terminal.expect("✗ Time zone:")
    terminal.type("Europe/Lisbon")
    assert terminal.exit_status() == 0, terminal.screen
    assert "python -m bot run" in terminal.screen
    typed_secrets = terminal.screen.split("✓ Model: gpt-4o-mini answers")[0]
    assert TEST_API_KEY not in typed_secrets and fake_telegram.token not in typed_secrets, "secrets are not echoed"

    written = _env_file(tmp_path / ".env")
    assert written["TELEGRAM_BOT_TOKEN"] == fake_telegram.token and written["OPENAI_API_KEY"] == TEST_API_KEY
    assert written["BOT_TIMEZONE"] == "Europe/Lisbon"
    config = json.loads((tmp_path / "workspace" / "preferences" / "runtime-config.json").read_text())
    assert config["access"]["allowedUsers"] == [777]


def test_a_model_models_json_does_not_know_gets_the_window_given_and_doctor_agrees(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    flags = [
        "--no-input", "--telegram-token", fake_telegram.token, "--base-url", fake_openai.base_url,
        "--api-key", TEST_API_KEY, "--model", "my-local-model", "--model-window", "16384", "--owner-id", "1",
    ]  # fmt: skip
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ Model window: input 16384 tokens" in result.stdout
    models = json.loads((tmp_path / "workspace" / "preferences" / "models.json").read_text())
    assert models["models"]["my-local-model"]["maxInputTokens"] == 16384

    doctor = run_main(["doctor"], {k: v for k, v in env.items() if k != "BOT_WORKSPACE"}, tmp_path)
    assert "✓ Model window: my-local-model: input 16384" in doctor.stdout, doctor.stdout


def _flags_for(fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, model: str) -> list[str]:
    """Every answer as a flag, with `model` as the chat model."""
    return [
        "--no-input", "--telegram-token", fake_telegram.token, "--base-url", fake_openai.base_url,
        "--api-key", TEST_API_KEY, "--model", model, "--owner-id", "4242", "--timezone", "UTC",
    ]  # fmt: skip


def test_the_graph_is_read_by_a_cheaper_model_the_endpoint_offers_unless_another_is_given(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.models = ["gpt-4o", "gpt-4.1-nano", "gpt-4o-mini"]  # gpt-4.1-nano is models.json's fast tier
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    flags = _flags_for(fake_openai, fake_telegram, "gpt-4o")
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ Knowledge graph: read by gpt-4.1-nano (rag.extractionModel)" in result.stdout
    config_file = tmp_path / "workspace" / "preferences" / "runtime-config.json"
    assert json.loads(config_file.read_text())["rag"] == {"extractionModel": "gpt-4.1-nano"}
    assert any(request["model"] == "gpt-4.1-nano" for request in fake_openai.chat_requests())  # checked on the spot

    # The owner's own choice, as a flag, is taken as it is (and checked).
    config_file.unlink()
    chosen = run_main(["onboard", *flags, "--extraction-model", "gpt-4o-mini"], env, tmp_path)
    assert "✓ Knowledge graph: read by gpt-4o-mini (rag.extractionModel)" in chosen.stdout
    assert json.loads(config_file.read_text())["rag"] == {"extractionModel": "gpt-4o-mini"}


def test_with_no_cheaper_model_on_the_endpoint_the_chat_model_reads_the_graph(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.models = ["gpt-4o", "some-local-model"]
    env = _fresh_env(tmp_path, fake_openai, fake_telegram)
    flags = _flags_for(fake_openai, fake_telegram, "gpt-4o")
    result = run_main(["onboard", *flags], env, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ Knowledge graph: read by gpt-4o (the endpoint offers no cheaper model the bot knows)" in result.stdout
    config = json.loads((tmp_path / "workspace" / "preferences" / "runtime-config.json").read_text())
    assert "rag" not in config

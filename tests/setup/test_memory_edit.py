"""`python -m bot memory edit`: MEMORY.md changed in $EDITOR (a real process in a pseudo-terminal) or from a pipe
(`main` in the test's process), saved whole, seen by the bot."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.command_line import run_main
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.setup.helpers import Terminal, setup_env


def test_piped_text_becomes_memory_md_and_the_next_message_carries_it(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    env = setup_env(tmp_path / "workspace", fake_openai, fake_telegram)
    result = run_main(["memory", "edit"], env, tmp_path, stdin="## About me\n- Lives in Porto.\n")
    assert result.returncode == 0, result.stderr
    memory_md = tmp_path / "workspace" / "memory" / "MEMORY.md"
    assert memory_md.read_text() == "## About me\n- Lives in Porto.\n"
    assert "Saved" in result.stdout

    run_main(["chat"], env, tmp_path, stdin="hello\n")
    assert "- Lives in Porto." in (fake_openai.system_prompts()[-1] or "")


def test_an_empty_pipe_leaves_memory_md_as_it_was(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    env = setup_env(tmp_path / "workspace", fake_openai, fake_telegram)
    before = run_main(["init"], env, tmp_path)
    assert before.returncode == 0
    memory_md = tmp_path / "workspace" / "memory" / "MEMORY.md"
    guide = memory_md.read_text()
    result = run_main(["memory", "edit"], env, tmp_path)  # stdin: empty
    assert result.returncode == 1 and "unchanged" in result.stderr
    assert memory_md.read_text() == guide


def test_the_editor_changes_a_copy_that_is_saved_when_it_exits(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write('- Likes green tea.\\n')\n")
    env = setup_env(tmp_path / "workspace", fake_openai, fake_telegram, EDITOR=f"{sys.executable} {editor}")
    terminal = Terminal(["memory", "edit"], env, tmp_path)
    assert terminal.exit_status() == 0, terminal.screen
    text = (tmp_path / "workspace" / "memory" / "MEMORY.md").read_text()
    assert text.startswith("<!--") and text.endswith("-->\n- Likes green tea.\n")
    assert "Saved" in terminal.screen

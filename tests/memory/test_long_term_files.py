"""MEMORY.md as a person's editor leaves it: a byte order mark, bytes that are not UTF-8, a binary file. What
the model is shown, what the log says, and that the bot's own rewrites keep every byte the person wrote."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import memory_section, say


async def test_a_byte_order_mark_never_reaches_the_model(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    memory_md = services.workspace.memory.long_term_file
    memory_md.write_bytes("\ufeff# About me\n- I drink GREEN tea.\n".encode())
    await say(services, channel, "1", "what do I drink?")
    section = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "## Long-term Memory\n# About me\n- I drink GREEN tea." in section
    assert "\ufeff" not in section


async def test_bytes_that_are_not_utf8_are_shown_replaced_logged_with_their_line_and_kept_by_the_bots_append(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    memory_md = services.workspace.memory.long_term_file
    latin1 = b"# About me\n- I live in Li\xe8ge, rue du Pont.\n"  # saved by an editor in Latin-1
    memory_md.write_bytes(latin1)
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("write_memory", {"content": "- My cat is called MISO."}, id="w1")]), "Noted."
    )
    with caplog.at_level(logging.WARNING):
        assert await say(services, channel, "1", "remember my cat is Miso") == "Noted."
    assert "- I live in Li\N{REPLACEMENT CHARACTER}ge, rue du Pont." in (
        memory_section(fake_openai.system_prompts()[0]) or ""
    )
    [warning] = [r.getMessage() for r in caplog.records if "[Memory] MEMORY.md" in r.getMessage()]
    assert "line 2 holds bytes that are not UTF-8" in warning and "save the file as UTF-8" in warning
    # The person's bytes are as they wrote them, the model's line after them.
    assert memory_md.read_bytes() == latin1 + b"- My cat is called MISO.\n"

    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("update_memory", {"old_text": "MISO", "new_text": "MISU"}, id="u1")]), "Ok."
    )
    await say(services, channel, "1", "sorry, Misu")
    assert memory_md.read_bytes() == latin1 + b"- My cat is called MISU.\n"


async def test_a_binary_file_saved_as_memory_md_is_left_out_of_the_prompt_logged_and_kept(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    memory_md = services.workspace.memory.long_term_file
    binary = b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256)) * 20  # a .docx saved under the name
    memory_md.write_bytes(binary)
    with caplog.at_level(logging.WARNING):
        await say(services, channel, "1", "hello")
        await say(services, channel, "1", "hello again")  # logged once per change of the file, not per message
    assert "## Long-term Memory" not in (fake_openai.system_prompts()[-1] or "")
    assert "\x00" not in str(fake_openai.last_chat_request()["messages"])
    [warning] = [r.getMessage() for r in caplog.records if "[Memory] MEMORY.md" in r.getMessage()]
    assert "it is not text (it holds NUL bytes" in warning
    assert memory_md.read_bytes() == binary


async def test_a_crlf_file_is_edited_by_the_model_as_it_reads_it(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    memory_md = services.workspace.memory.long_term_file
    memory_md.write_bytes(b"# About me\r\n- My cat is MISO.\r\n- She is grey.\r\n")
    old_text = "- My cat is MISO.\n- She is grey."  # as read_memory shows it
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("update_memory", {"old_text": old_text, "new_text": "- My cat is MISU."})]),
        "Ok.",
    )
    await say(services, channel, "1", "my cat is Misu, and forget the colour")
    assert fake_openai.chat_requests()[-1]["messages"][-1]["content"] == "MEMORY.md updated."
    assert memory_md.read_text() == "# About me\n- My cat is MISU.\n"


async def test_a_memory_md_linked_elsewhere_stays_linked_when_the_model_writes_to_it(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    synced = tmp_path / "Sync" / "memory.md"  # the person keeps it in a synced folder
    synced.parent.mkdir()
    synced.write_text("# About me\n- I drink GREEN tea.\n")
    memory_md = services.workspace.memory.long_term_file
    memory_md.unlink(missing_ok=True)
    memory_md.symlink_to(synced)
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("write_memory", {"content": "- My cat is called MISO."})]), "Noted."
    )
    await say(services, channel, "1", "remember my cat is Miso")
    assert memory_md.is_symlink() and memory_md.resolve() == synced.resolve()
    assert synced.read_text() == "# About me\n- I drink GREEN tea.\n- My cat is called MISO.\n"
    synced.write_text("# About me\n- I drink BLACK tea.\n")  # edited where it lives: the next message reads it
    await say(services, channel, "1", "what do I drink?")
    assert "BLACK tea" in (memory_section(fake_openai.system_prompts()[-1]) or "")

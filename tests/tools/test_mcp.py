"""MCP servers through the whole pipeline: a real server process written with the same SDK, over
stdio and over streamable HTTP; its tools listed and called by the fake model, a crash and a hang
turned into tool errors (the turn finishes), restarts, allow and deny lists, live add and remove."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Application
from bot.logging_setup import configure_logging
from bot.tools.mcp import McpState, tool_name
from tests.command_line import logging_kept
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say
from tests.waiting import wait_until

SERVER_SCRIPT = str(Path(__file__).with_name("mcp_test_server.py"))
SECRET = "mcp-secret-value-8472"


def stdio_server(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER_SCRIPT, "stdio"], **extra}


def write_config(services: Application, config: dict[str, Any]) -> None:
    path = services.workspace.runtime_config_file
    path.write_text(json.dumps(config))
    # Seen as a change even within one filesystem timestamp tick.
    stamp = time.time_ns() + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


async def apply(services: Application, config: dict[str, Any]) -> None:
    write_config(services, config)
    await services.mcp.sync(await services.config_store.current())


def ready(services: Application, name: str) -> Callable[[], bool]:
    def check() -> bool:
        return any(s.name == name and s.state is McpState.READY for s in services.mcp.statuses())

    return check


def offered(fake_openai: FakeOpenAI, request: int = -1) -> set[str]:
    return {tool["function"]["name"] for tool in fake_openai.chat_requests()[request].get("tools", [])}


def tool_results(fake_openai: FakeOpenAI) -> list[str]:
    return [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool"]


@pytest.fixture
async def mcp_services(
    workspace_dir: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Application]:
    monkeypatch.setenv("MCP_TEST_SECRET", SECRET)
    built = Application(env_for(workspace_dir, fake_openai))
    yield built
    await built.stop()


async def test_a_stdio_servers_tools_are_offered_with_its_prefix_and_called(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server()}})
    await wait_until(ready(mcp_services, "calc"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__add", {"a": 2, "b": 40}, id="c1")]), "It is 42.")

    assert await say(mcp_services, channel, "1", "what is 2 + 40?") == "It is 42."

    assert {"calc__add", "calc__echo", "calc__hang", "calc__crash"} <= offered(fake_openai, 0)
    schema = next(t for t in fake_openai.chat_requests()[0]["tools"] if t["function"]["name"] == "calc__add")
    assert set(schema["function"]["parameters"]["properties"]) == {"a", "b"}
    assert tool_results(fake_openai) == ["42"]
    status = await say(mcp_services, channel, "1", "/status")
    assert "MCP servers: calc (stdio) ready, 6 tools (6 offered)" in status
    # The call and its result carry the turn's id (the user message's) in the log.
    session = await mcp_services.sessions.get("test:1")
    assert session is not None
    turn_id = session.messages[0].id
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"turn {turn_id}:" in line and "asked for calc__add" in line for line in lines)
    assert any(f"turn {turn_id}: calc__add ran" in line for line in lines)


async def test_allow_and_deny_lists_apply_live(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server(allowTools=["echo", "add", "crash"])}})
    await wait_until(ready(mcp_services, "calc"))
    await say(mcp_services, channel, "1", "hi")
    assert {name for name in offered(fake_openai) if name.startswith("calc__")} == {
        "calc__echo",
        "calc__add",
        "calc__crash",
    }

    write_config(
        mcp_services, {"mcpServers": {"calc": stdio_server(allowTools=["echo", "add", "crash"], denyTools=["crash"])}}
    )
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__crash", {}, id="c1")]), "ok")
    await say(mcp_services, channel, "1", "crash it")
    assert {name for name in offered(fake_openai, -2) if name.startswith("calc__")} == {"calc__echo", "calc__add"}
    # A denied tool is not run even when the model names it: the server is still up.
    assert tool_results(fake_openai)[0].startswith("Error: there is no tool named 'calc__crash'")
    assert [s.restarts for s in mcp_services.mcp.statuses()] == [0]


async def test_a_crash_mid_call_is_a_tool_error_and_the_server_comes_back(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server()}, "mcp": {"restartBackoffSeconds": 0.2}})
    await wait_until(ready(mcp_services, "calc"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__crash", {}, id="c1")]), "The tool crashed.")

    started = time.monotonic()
    assert await say(mcp_services, channel, "1", "crash please") == "The tool crashed."
    assert time.monotonic() - started < 10
    [result] = tool_results(fake_openai)
    assert result.startswith("Error: the MCP server calc failed on crash")
    # The supervisor finds the dead connection at once (not at the next health check) and says so once.
    await wait_until(
        lambda: any(
            "[MCP] Server calc failed: MCPError: Connection closed; restarting in 0.2 s" in record.getMessage()
            for record in caplog.records
        ),
        timeout=5,
    )

    await wait_until(lambda: ready(mcp_services, "calc")() and mcp_services.mcp.statuses()[0].restarts >= 1)
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__echo", {"text": "back"}, id="c2")]), "done")
    await say(mcp_services, channel, "1", "echo back")
    assert tool_results(fake_openai)[-1] == "echo: back"


async def test_a_hanging_call_ends_in_a_tool_error_within_the_timeout(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server()}, "mcp": {"callTimeoutSeconds": 1.0}})
    await wait_until(ready(mcp_services, "calc"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__hang", {"seconds": 60}, id="c1")]), "It hung.")

    started = time.monotonic()
    assert await say(mcp_services, channel, "1", "wait for it") == "It hung."
    assert time.monotonic() - started < 8
    assert tool_results(fake_openai) == ["Error: the MCP server calc did not answer hang within 1 s"]


async def test_a_server_that_cannot_start_is_logged_shown_and_retried_without_blocking_turns(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(5)"]}
    await apply(
        mcp_services,
        {"mcpServers": {"broken": broken, "calc": stdio_server()}, "mcp": {"restartBackoffSeconds": 0.2}},
    )
    await wait_until(ready(mcp_services, "calc"))
    await wait_until(lambda: any(s.name == "broken" and s.restarts >= 2 for s in mcp_services.mcp.statuses()))

    assert await say(mcp_services, channel, "1", "hi") == "echo: hi"
    assert not any(name.startswith("broken__") for name in offered(fake_openai))
    failures = [r.getMessage() for r in caplog.records if "[MCP] Server broken failed to start" in r.getMessage()]
    assert failures and all("restarting in" in line for line in failures)
    # The backoff doubles: 0.2 s, 0.4 s, ...
    assert "restarting in 0.2 s" in failures[0] and "restarting in 0.4 s" in failures[1]
    status = await say(mcp_services, channel, "1", "/status")
    assert "broken (stdio) " in status and "calc (stdio) ready" in status


async def test_a_server_that_never_answers_its_handshake_is_a_failed_start(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    silent = {"command": sys.executable, "args": ["-c", "import time; time.sleep(120)"]}
    await apply(mcp_services, {"mcpServers": {"silent": silent}, "mcp": {"startTimeoutSeconds": 1.0}})
    await wait_until(lambda: any(s.last_error for s in mcp_services.mcp.statuses()))
    [status] = mcp_services.mcp.statuses()
    assert status.state is McpState.FAILED
    assert status.last_error == "no answer within 1 s"
    assert await say(mcp_services, channel, "1", "hi") == "echo: hi"
    started = time.monotonic()
    await apply(mcp_services, {"mcpServers": {}})  # removing it stops its retries, and its process
    assert time.monotonic() - started < 12
    assert mcp_services.mcp.statuses() == []


async def test_servers_added_and_removed_in_the_config_start_and_stop_live(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    assert await say(mcp_services, channel, "1", "hi") == "echo: hi"
    assert not any("__" in name for name in offered(fake_openai))

    # A server added by an edit is offered to the very next message: the edit is read as the message comes,
    # the server starts then, and the message waits for it (at most mcp.readyWaitSeconds: the longest
    # allowed, as a busy machine can take longer than the default 5 s to start a Python process).
    write_config(mcp_services, {"mcpServers": {"calc": stdio_server()}, "mcp": {"readyWaitSeconds": 60}})
    await say(mcp_services, channel, "1", "anything new?")
    assert "calc__echo" in offered(fake_openai)

    write_config(mcp_services, {"mcpServers": {}})
    await say(mcp_services, channel, "1", "gone?")
    assert "calc__echo" not in offered(fake_openai)
    assert not mcp_services.mcp.statuses()

    # The whole MCP client can be switched off.
    write_config(mcp_services, {"mcpServers": {"calc": stdio_server()}, "mcp": {"enabled": False}})
    await say(mcp_services, channel, "1", "off?")
    await asyncio.sleep(0.5)
    assert mcp_services.mcp.statuses() == []


async def test_a_server_added_while_the_bot_runs_starts_when_the_edit_is_seen_with_no_message(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    mcp_services.add_channels([channel])
    await mcp_services.start()
    write_config(mcp_services, {"mcpServers": {"calc": stdio_server()}})
    # The scheduler reads the file every second; the server starts then, before anyone writes.
    await wait_until(ready(mcp_services, "calc"), timeout=10)
    assert fake_openai.chat_requests() == []

    write_config(mcp_services, {"mcpServers": {"calc": stdio_server(denyTools=["crash"])}})
    await wait_until(lambda: mcp_services.config_store.in_force().mcp_servers["calc"].deny_tools == ["crash"], 5)
    assert await say(mcp_services, channel, "1", "hi") == "echo: hi"
    assert "calc__echo" in offered(fake_openai) and "calc__crash" not in offered(fake_openai)


async def test_a_message_waits_for_a_starting_server_no_longer_than_the_bound(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    silent = {"command": sys.executable, "args": ["-c", "import time; time.sleep(120)"]}
    write_config(mcp_services, {"mcpServers": {"silent": silent}, "mcp": {"readyWaitSeconds": 1.0}})
    started = time.monotonic()
    assert await say(mcp_services, channel, "1", "hi") == "echo: hi"
    assert 1.0 <= time.monotonic() - started < 10  # far under the server's 120 s: the wait is bounded
    assert not any(name.startswith("silent__") for name in offered(fake_openai))
    # A message that comes while the server is still on its first start waits the bound again, never longer.
    started = time.monotonic()
    assert await say(mcp_services, channel, "1", "again") == "echo: again"
    assert time.monotonic() - started < 10


async def test_secrets_from_the_environment_never_reach_the_model(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    server = stdio_server(env={"API_TOKEN": "${MCP_TEST_SECRET}"})
    await apply(mcp_services, {"mcpServers": {"calc": server}})
    await wait_until(ready(mcp_services, "calc"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__show_env", {"name": "API_TOKEN"}, id="c1")]), "ok")
    await say(mcp_services, channel, "1", "show the token")
    assert tool_results(fake_openai) == ["API_TOKEN=[REDACTED]"]
    assert SECRET not in json.dumps(fake_openai.chat_requests())
    session_file = mcp_services.workspace.sessions_dir / "test:1.json"
    assert SECRET not in session_file.read_text()


async def test_a_missing_environment_variable_is_a_failed_start_naming_it(
    mcp_services: Application, caplog: pytest.LogCaptureFixture
) -> None:
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server(env={"TOKEN": "${NOT_SET_ANYWHERE_42}"})}})
    await wait_until(lambda: any(s.last_error for s in mcp_services.mcp.statuses()))
    [status] = mcp_services.mcp.statuses()
    assert status.last_error is not None and "${NOT_SET_ANYWHERE_42} is not set" in status.last_error


async def test_a_server_that_dies_at_start_says_why_in_the_log_and_status_never_on_the_terminal(
    mcp_services: Application,
    channel: RecordingChannel,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO)
    dying = (
        "import os, sys; sys.stderr.write(f'connecting with {os.environ[\"TOKEN\"]}\\n'); "
        "sys.stderr.write('ModuleNotFoundError: No module named mcp_files\\n'); sys.exit(1)"
    )
    broken = {"command": sys.executable, "args": ["-c", dying], "env": {"TOKEN": "${MCP_TEST_SECRET}"}}
    stream = io.StringIO()
    with logging_kept():
        configure_logging("INFO", [], stream)
        await apply(mcp_services, {"mcpServers": {"files": broken}, "mcp": {"restartBackoffSeconds": 30}})
        await wait_until(lambda: any(s.last_error for s in mcp_services.mcp.statuses()))
    [status] = mcp_services.mcp.statuses()
    assert (
        status.last_error
        == "MCPError: Connection closed (its last words: ModuleNotFoundError: No module named mcp_files)"
    )
    assert "(its last words: ModuleNotFoundError: No module named mcp_files)" in await say(
        mcp_services, channel, "1", "/status"
    )
    logged = stream.getvalue()
    assert "[MCP] Server files: connecting with [REDACTED]" in logged and SECRET not in logged
    assert (
        "[MCP] Server files failed to start: MCPError: Connection closed (its last words: ModuleNotFoundError" in logged
    )
    assert "mcp_files" not in capfd.readouterr().err  # the terminal (the console chat's screen) stays the chat's


async def test_two_tools_whose_names_read_the_same_to_the_model_are_one_offered_and_the_other_logged(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    server = {"command": sys.executable, "args": [SERVER_SCRIPT, "stdio", "clashing"]}
    await apply(mcp_services, {"mcpServers": {"calc": server}})
    await wait_until(ready(mcp_services, "calc"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("calc__look_up", {}, id="c1")]), "found")
    await say(mcp_services, channel, "1", "look it up")
    assert [name for name in offered(fake_openai, 0) if name.startswith("calc__look")] == ["calc__look_up"]
    assert tool_results(fake_openai) == ["found by look.up"]
    assert (
        "[MCP] Server calc: its tools 'look.up' and 'look_up' are both calc__look_up to the model; "
        "only 'look.up' is offered"
    ) in caplog.text
    assert "calc (stdio) ready, 8 tools (7 offered)" in await say(mcp_services, channel, "1", "/status")


@pytest.fixture
def http_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, SERVER_SCRIPT, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


async def test_a_streamable_http_server_is_listed_and_called(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, http_server: str
) -> None:
    await apply(
        mcp_services, {"mcpServers": {"remote": {"url": http_server, "headers": {"X-Token": "${MCP_TEST_SECRET}"}}}}
    )
    await wait_until(ready(mcp_services, "remote"))
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("remote__echo", {"text": "over http"}, id="c1")]),
        Reply(tool_calls=[ToolCallSpec("remote__big", {"chars": 40000}, id="c2")]),
        "done",
    )
    assert await say(mcp_services, channel, "1", "echo over http") == "done"
    echo, big = tool_results(fake_openai)
    assert echo == "echo: over http"
    # A large result goes through the same eviction as a built-in tool's.
    assert len(big) < 5000 and "tool_results/" in big
    assert any((mcp_services.workspace.root / "tool_results").rglob("c2*"))


async def test_a_hanging_http_server_is_a_tool_error_too(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, http_server: str
) -> None:
    await apply(mcp_services, {"mcpServers": {"remote": {"url": http_server}}, "mcp": {"callTimeoutSeconds": 1.0}})
    await wait_until(ready(mcp_services, "remote"))
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("remote__hang", {"seconds": 60}, id="c1")]), "It hung.")
    started = time.monotonic()
    assert await say(mcp_services, channel, "1", "wait") == "It hung."
    assert time.monotonic() - started < 8
    assert tool_results(fake_openai) == ["Error: the MCP server remote did not answer hang within 1 s"]


async def test_what_a_server_config_takes_from_the_environment_is_scrubbed_from_the_log_too(
    mcp_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    stream = io.StringIO()
    with logging_kept():
        configure_logging("INFO", [], stream)
        await apply(mcp_services, {"mcpServers": {"calc": stdio_server(env={"API_TOKEN": "${MCP_TEST_SECRET}"})}})
        await wait_until(ready(mcp_services, "calc"))
        # Whatever echoes it later (a server's error, a library's debug line) is scrubbed.
        logging.getLogger("bot.test").warning("[MCP] the server said: bad token %s", SECRET)
    assert "the server said: bad token [REDACTED]" in stream.getvalue()
    assert SECRET not in stream.getvalue()


async def test_a_bad_server_entry_is_refused_alone_naming_the_key_and_the_good_entries_stay(
    mcp_services: Application, caplog: pytest.LogCaptureFixture
) -> None:
    await apply(mcp_services, {"mcpServers": {"calc": stdio_server()}})
    await wait_until(ready(mcp_services, "calc"))
    bad_entries: list[tuple[dict[str, Any], str]] = [
        ({"both": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}, "mcpServers.both"),
        ({"neither": {"args": ["x"]}}, "mcpServers.neither"),
        ({"bad name!": {"command": "x"}}, "a server name is 1 to 32 letters"),
        ({"sse": {"url": "http://127.0.0.1:1/sse", "type": "sse"}}, "mcpServers.sse.type"),
        ({"typo": {"command": "x", "argz": []}}, "mcpServers.typo.argz"),
        ({"ftp": {"url": "ftp://example.org/mcp"}}, "mcpServers.ftp"),
    ]
    for entry, named in bad_entries:
        caplog.clear()
        write_config(mcp_services, {"mcpServers": {"calc": stdio_server(), **entry}})
        config = await mcp_services.config_store.current()
        assert list(config.mcp_servers) == ["calc"]  # the bad entry alone is left out
        [refusal] = [r.getMessage() for r in caplog.records if "[Config] Refused" in r.getMessage()]
        assert named in refusal, refusal
    assert [status.name for status in mcp_services.mcp.statuses()] == ["calc"]


def test_tool_names_are_what_model_apis_accept() -> None:
    assert tool_name("files", "read_file") == "files__read_file"
    assert tool_name("my-server", "get.thing/v2") == "my-server__get_thing_v2"
    assert len(tool_name("s" * 32, "t" * 80)) == 64

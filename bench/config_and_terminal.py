"""What a person meets in the first week at the edges: an MCP server added by an edit, and a paste in the
terminal chat.

MCP: a bot built as `python -m bot` builds it and started (its scheduler reads runtime-config.json every
second), with the test suite's MCP server (a real process over stdio). Each round adds a server under a
new name (and removes the last one): once with no message, timing the edit to the server being ready;
once with a message sent right after the edit, checking that the server's tools are offered to that very
message and timing its reply (the wait for the server is part of it).

Terminal: `python -m bot chat` in a pseudo-terminal against the fake model; a 20,000-character line is
pasted and the time until its echo is on the screen is taken, and what the model received is checked
for length.

Run: `.venv/bin/python -m bench.config_and_terminal [--rounds N] [--json]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.app import Application
from tests.channels.test_console_terminal import Terminal
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say
from tests.tools.test_mcp import ready, stdio_server, write_config
from tests.waiting import wait_until

PASTE_CHARS = 20_000


async def mcp_rounds(fake: FakeOpenAI, workspace: Path, rounds: int) -> dict[str, Any]:
    app = Application(env_for(workspace, fake))
    channel = RecordingChannel()
    app.add_channels([channel])
    await app.start()
    idle_ready: list[float] = []
    replies: list[float] = []
    offered = 0
    try:
        for round_ in range(rounds):
            name = f"idle{round_}"
            write_config(app, {"mcpServers": {name: stdio_server()}})
            started = time.monotonic()
            await wait_until(ready(app, name), timeout=60)
            idle_ready.append(time.monotonic() - started)

            name = f"busy{round_}"
            write_config(app, {"mcpServers": {name: stdio_server()}})
            started = time.monotonic()
            await say(app, channel, "1", f"anything new? {round_}")
            replies.append(time.monotonic() - started)
            tools = {t["function"]["name"] for t in fake.last_chat_request().get("tools", [])}
            offered += f"{name}__echo" in tools
    finally:
        await app.stop()
    return {"idle_ready_s": statistics.median(idle_ready), "reply_s": statistics.median(replies), "offered": offered}


def echoed_once_more(seen: int) -> Callable[[bytes], bool]:
    """Whether the screen shows one more echo than `seen`, complete, with the prompt after it."""
    return lambda screen: screen.count(b"echo: ") > seen and screen.endswith(b"end\r\n> ")


def paste_rounds(fake: FakeOpenAI, workspace: Path, rounds: int) -> dict[str, Any]:
    terminal = Terminal(workspace, fake)
    times: list[float] = []
    whole = 0
    try:
        terminal.read_until(lambda s: s.endswith(b"> "))
        for round_ in range(rounds):
            text = (f"{round_}" * PASTE_CHARS)[: PASTE_CHARS - 3] + "end"
            started = time.monotonic()
            terminal.type(text.encode() + b"\r")
            terminal.read_until(echoed_once_more(terminal.screen.count(b"echo: ")), 120)
            times.append(time.monotonic() - started)
            sent = [m["content"] for m in fake.last_chat_request()["messages"] if m["role"] == "user"][-1]
            whole += sent == text
        terminal.type(b"\x04")
        terminal.process.wait(timeout=15)
    finally:
        terminal.close()
    return {"paste_s": statistics.median(times), "whole": whole}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, FakeOpenAI() as fake:
        mcp = asyncio.run(mcp_rounds(fake, Path(folder) / "mcp" / "workspace", args.rounds))
        (Path(folder) / "chat").mkdir()
        paste = paste_rounds(fake, Path(folder) / "chat" / "workspace", args.rounds)
    print(
        f"MCP server added by an edit, no message: ready after a median {mcp['idle_ready_s']:.2f} s; "
        f"added right before a message: its tools offered to that message in {mcp['offered']}/{args.rounds} rounds, "
        f"reply in a median {mcp['reply_s']:.2f} s (the wait for the server included)"
    )
    print(
        f"terminal chat: a {PASTE_CHARS:,}-character paste arrived whole in {paste['whole']}/{args.rounds} rounds, "
        f"echo on the screen after a median {paste['paste_s']:.2f} s"
    )
    if args.json:
        print(json.dumps({"bench": "config_and_terminal", "rounds": args.rounds, **mcp, **paste}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

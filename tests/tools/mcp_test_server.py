"""A small MCP server written with the same SDK the bot uses, run by the tests as a real process.

`python mcp_test_server.py stdio` talks over stdin/stdout; `python mcp_test_server.py http PORT`
serves streamable HTTP on 127.0.0.1:PORT at /mcp. `python mcp_test_server.py stdio clashing` adds two
tools whose names read the same to the model (`look.up` and `look_up`).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("test-tools")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def show_env(name: str) -> str:
    """The value of an environment variable of the server process."""
    return f"{name}={os.environ.get(name, '')}"


@server.tool()
def big(chars: int) -> str:
    """A long text of `chars` characters."""
    return "".join(f"line {i} " + "y" * 60 + "\n" for i in range(chars // 68 + 1))[:chars]


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(3)


@server.tool()
async def hang(seconds: float) -> str:
    """Answer after `seconds`."""
    await anyio.sleep(seconds)
    return "woke up"


def look_up_by_dot() -> str:
    return "found by look.up"


def look_up_by_underscore() -> str:
    return "found by look_up"


if __name__ == "__main__":
    if sys.argv[2:] == ["clashing"]:
        server.tool(name="look.up", description="Look up, dotted.")(look_up_by_dot)
        server.tool(name="look_up", description="Look up, underscored.")(look_up_by_underscore)
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), streamable_http_path="/mcp")

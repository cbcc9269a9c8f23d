"""`CommandRegistry`: recognises `/command args` and runs the matching handler.

Text counts as a command only when it starts with `/name` followed by a space, the end, or
`@botname` (Telegram's form in groups), so a path like `/usr/bin` is just a message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.channels.base import Channel
from bot.domain.inbound import InboundMessage

log = logging.getLogger(__name__)

_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class CommandRequest:
    """One invocation: who sent it, the text after the command, and the channel to answer on."""

    inbound: InboundMessage
    args: str
    channel: Channel


CommandHandler = Callable[[CommandRequest], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    handler: CommandHandler
    usage: str = ""
    # Runs at once instead of waiting behind the chat's queued messages (e.g. /stop).
    immediate: bool = False


def parse_command(text: str) -> tuple[str, str] | None:
    """`(name, args)` when `text` is a command, else None."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    return match.group(1).lower(), (match.group(3) or "").strip()


class CommandRegistry:
    """The commands the bot knows, in the order `/help` lists them."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, command: Command) -> None:
        self._commands[command.name] = command

    def commands(self) -> list[Command]:
        return list(self._commands.values())

    def is_command(self, text: str) -> bool:
        return parse_command(text) is not None

    def is_immediate(self, text: str) -> bool:
        parsed = parse_command(text)
        command = self._commands.get(parsed[0]) if parsed else None
        return command is not None and command.immediate

    async def execute(self, inbound: InboundMessage, channel: Channel) -> str:
        """Run the command in `inbound.text`; an unknown one gets the list of commands."""
        parsed = parse_command(inbound.text)
        if parsed is None:
            raise ValueError("not a command")
        name, args = parsed
        command = self._commands.get(name)
        if command is None:
            return f"Unknown command /{name}.\n\n{self.help_text()}"
        try:
            return await command.handler(CommandRequest(inbound, args, channel))
        except Exception:
            # A command that fails (a store that does not answer, a bug) still answers: silence would leave the
            # person waiting for a reply that never comes.
            log.exception("[Commands] /%s failed", name)
            return f"/{name} failed: something went wrong on my side (the bot's log says what). Please try again."

    def help_text(self) -> str:
        lines = ["Commands:"]
        for command in self._commands.values():
            usage = f" {command.usage}" if command.usage else ""
            lines.append(f"/{command.name}{usage} — {command.description}")
        return "\n".join(lines)

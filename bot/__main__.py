"""The command line: `python -m bot run | chat | init | status` (also the `bot` console script)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from pydantic import ValidationError

from bot.app import build_channels, build_services, prepare_workspace, serve, shutdown, stop_on_signals
from bot.channels.console import ConsoleChannel
from bot.clock import InvalidTimezone
from bot.logging_setup import configure_logging
from bot.runtime_config import InvalidRuntimeConfig
from bot.settings import EnvSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bot", description="A self-hosted AI assistant with a memory.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="start every configured channel and the scheduler")
    commands.add_parser("chat", help="talk to the bot in this terminal")
    commands.add_parser("init", help="create the workspace without starting anything")
    commands.add_parser("status", help="print /status for every session in the workspace")
    return parser


async def _run(env: EnvSettings) -> None:
    services = build_services(env)
    channels = build_channels(env)
    until = asyncio.Event()
    stop_on_signals(until)
    await serve(services, channels, until)


async def _chat(env: EnvSettings) -> None:
    services = build_services(env)
    console = ConsoleChannel()
    until = asyncio.Event()
    stop_on_signals(until)
    await console.start(lambda inbound: services.router.accept(inbound, console))
    services.scheduler.start()
    input_closed = asyncio.create_task(console.input_closed.wait())
    interrupted = asyncio.create_task(until.wait())
    await asyncio.wait({input_closed, interrupted}, return_when=asyncio.FIRST_COMPLETED)
    if not until.is_set():
        # End of input: answer everything typed before it, then leave.
        await services.router.dispatcher.drain()
    interrupted.cancel()
    await shutdown(services, [console])


async def _status(env: EnvSettings) -> None:
    services = build_services(env)
    ids = services.sessions.stored_ids()
    if not ids:
        print(f"No sessions yet in {services.workspace.root}")
    for session_id in ids:
        session = await services.sessions.get(session_id)
        if session is not None:
            print(await services.status.report(session))
            print()
    await services.llm.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        env = EnvSettings()
    except ValidationError as error:
        print(f"Invalid environment: {error}", file=sys.stderr)
        return 2
    explicit_level = "bot_log_level" in env.model_fields_set
    # The terminal chat keeps the screen for the conversation unless a log level was asked for.
    level = env.bot_log_level if explicit_level or args.command == "run" else "WARNING"
    configure_logging(level, env.secrets())
    try:
        if args.command == "init":
            workspace = prepare_workspace(env)
            print(f"Workspace ready at {workspace.root.resolve()}")
        elif args.command == "run":
            asyncio.run(_run(env))
        elif args.command == "chat":
            asyncio.run(_chat(env))
        elif args.command == "status":
            asyncio.run(_status(env))
    except (InvalidTimezone, InvalidRuntimeConfig) as error:
        print(f"Cannot start: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The command line: `python -m bot run | chat | init | status | pairing | doctor | onboard | memory edit` (also the
`bot` console script)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from bot.access.pairing import PairingError, PairingStorage
from bot.app import Application, stop_on_signals
from bot.channels.console import ConsoleChannel
from bot.channels.telegram_channel import TelegramStartError
from bot.clock import InvalidTimezone
from bot.database.connection import Database, DatabaseError
from bot.environment import InvalidEnvironment, read_environment, workspace_line
from bot.logging_setup import configure_logging, redact, secrets_in_environment
from bot.memory.documents import OWNER_SCOPE, MemoryFiles
from bot.runtime_config import InvalidRuntimeConfig
from bot.settings import EnvSettings
from bot.setup.doctor import doctor
from bot.setup.export import export_workspace
from bot.setup.memory_edit import edit_memory
from bot.setup.migrate import migrate_workspace
from bot.setup.onboard import add_onboard_arguments, onboard
from bot.setup.workspace import prepare_workspace
from bot.storage.durability import DeferredSync
from bot.stores import choose_stores
from bot.workspace import Workspace


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bot", description="A self-hosted AI assistant with a memory.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="start every configured channel and the scheduler")
    commands.add_parser("chat", help="talk to the bot in this terminal")
    commands.add_parser("init", help="create the workspace without starting anything")
    commands.add_parser("status", help="print /status for every session in the workspace")
    pairing = commands.add_parser("pairing", help="strangers waiting for access; admit one by code")
    pairing_commands = pairing.add_subparsers(dest="pairing_command", required=True)
    pairing_commands.add_parser("list", help="pending pairing requests")
    approve = pairing_commands.add_parser("approve", help="admit the sender of a pairing code")
    approve.add_argument("code")
    commands.add_parser("migrate", help="copy the workspace's files into the database of BOT_DATABASE_URL")
    export = commands.add_parser("export", help="write what the database holds as a workspace's files")
    export.add_argument("folder", nargs="?", type=Path, help="where to write (default: the workspace)")
    commands.add_parser("doctor", help="check the setup: one line per check, and the fix for each failure")
    add_onboard_arguments(commands.add_parser("onboard", help="first set-up: asks, checks each answer, writes .env"))
    memory = commands.add_parser("memory", help="the long-term memory file")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True)
    memory_commands.add_parser("edit", help="open MEMORY.md in $EDITOR; the edit is saved whole or not at all")
    return parser


async def _run(env: EnvSettings) -> None:
    # Before anything starts: a SIGTERM while the application is being built (the knowledge graph writes
    # its files then) must still be a clean stop, not the default kill.
    until = asyncio.Event()
    stop_on_signals(until)
    app = Application(env)
    try:
        app.add_channels(app.configured_channels())
        await app.start()
        await until.wait()
    finally:
        await app.stop()


async def _chat(env: EnvSettings) -> None:
    until = asyncio.Event()
    stop_on_signals(until)
    app = Application(env)
    console = ConsoleChannel(history_file=app.workspace.chat_history_file, banner=chat_banner(app))
    app.add_channels([console])
    try:
        await app.start()
        await _until_input_ends(console, until, app)
    finally:
        await app.stop()


async def _edit_memory(env: EnvSettings) -> int:
    workspace = prepare_workspace(env)
    stores = choose_stores(env, workspace, DeferredSync())
    await stores.start()
    try:
        if stores.memory_documents is None:
            return await edit_memory(MemoryFiles(workspace.memory), str(workspace.memory.long_term_file))
        return await edit_memory(stores.memory_documents(OWNER_SCOPE), "MEMORY.md in the database")
    finally:
        await stores.close()


def chat_banner(app: Application) -> str:
    """The terminal chat's first line: what it talks to, where it keeps things, and how to get help or leave."""
    workspace = app.workspace
    return (
        f"memory-bot · model {app.config_store.in_force().llm.model} · workspace {workspace.root.resolve()} · "
        f"/help for commands · Ctrl-D to quit · log in {workspace.chat_log_file.relative_to(workspace.root)}"
    )


async def _until_input_ends(console: ConsoleChannel, until: asyncio.Event, app: Application) -> None:
    input_closed = asyncio.create_task(console.input_closed.wait())
    interrupted = asyncio.create_task(until.wait())
    await asyncio.wait({input_closed, interrupted}, return_when=asyncio.FIRST_COMPLETED)
    if not until.is_set():
        # End of input: answer everything typed before it, then leave.
        await app.router.dispatcher.drain()
    input_closed.cancel()
    interrupted.cancel()


async def _status(env: EnvSettings) -> None:
    app = Application(env)  # built, never started: no channel, no scheduler
    try:
        await app.stores.start()  # the database, when the sessions are kept there
        ids = await app.sessions.stored_ids()
        if not ids:
            print(f"No sessions yet in {app.workspace.root}")
        for session_id in ids:
            session = await app.sessions.get(session_id)
            if session is not None:
                print(await app.status.report(session))
                print()
    finally:
        await app.stop()


async def _pairing(env: EnvSettings, command: str, code: str | None) -> int:
    stores = choose_stores(env, prepare_workspace(env), DeferredSync())
    await stores.start()
    try:
        return await _pairing_command(stores.pairing, command, code)
    finally:
        await stores.close()


async def _pairing_command(store: PairingStorage, command: str, code: str | None) -> int:
    if command == "list":
        pending = await store.pending()
        if not pending:
            print("No pending pairing requests.")
        for request in pending:
            who = f"@{request.username}" if request.username else "(no username)"
            print(f"{request.code}  user {request.user_id} {who}  expires {request.expires_at:%Y-%m-%d %H:%M} UTC")
        return 0
    try:
        user = await store.approve(code or "")
    except PairingError as error:
        print(error, file=sys.stderr)
        return 1
    who = f" (@{user.username})" if user.username else ""
    print(f"Approved user {user.user_id}{who}: they can talk to the bot now.")
    return 0


async def _migrate(env: EnvSettings) -> int:
    if env.bot_database_url is None:
        print("BOT_DATABASE_URL is not set: there is no database to copy the workspace into.", file=sys.stderr)
        return 2
    workspace = prepare_workspace(env)
    database = Database(env.bot_database_url.get_secret_value())
    await database.start()
    try:
        print((await migrate_workspace(workspace, database)).line())
    finally:
        await database.close()
    return 0


async def _export(env: EnvSettings, folder: Path | None) -> int:
    if env.bot_database_url is None:
        print("BOT_DATABASE_URL is not set: there is no database to export.", file=sys.stderr)
        return 2
    workspace = Workspace(folder) if folder is not None else prepare_workspace(env)
    database = Database(env.bot_database_url.get_secret_value())
    await database.start()
    try:
        print((await export_workspace(database, workspace)).line(workspace.root))
    finally:
        await database.close()
    return 0


def _nothing_to_run(env: EnvSettings) -> int:
    """`bot run` with no channel and no listener: complete the workspace (as `run` always does), then say
    what to set instead of idling where nobody can reach the bot."""
    workspace = prepare_workspace(env)
    print(
        "Cannot start: no channel is configured, so nobody could reach the bot. Set TELEGRAM_BOT_TOKEN "
        f"(in the environment, or in a .env file in the working directory: {Path.cwd() / '.env'}) to talk to it "
        "on Telegram, or run `python -m bot chat` to talk to it in this terminal. "
        f"The workspace is ready at {workspace.root.resolve()}.",
        file=sys.stderr,
    )
    return 2


# Commands whose output is their own lines (one per check or question), not a log.
_OWN_LINES_COMMANDS = frozenset({"doctor", "onboard"})

# What the bot writes is its owner's private life: folders 0700 and files 0600, whoever creates them.
PRIVATE_UMASK = 0o077


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.umask(PRIVATE_UMASK)
    try:
        env = read_environment()
    except InvalidEnvironment as error:
        print(error, file=sys.stderr)
        return 2
    # The terminal chat keeps the screen for the conversation: its log goes to a file in the workspace.
    log_file = Workspace(env.bot_workspace).chat_log_file if args.command == "chat" else None
    # `doctor` and `onboard` say what failed in lines of their own: a log line between them is noise,
    # unless the owner asked for the details (`BOT_LOG_LEVEL=DEBUG`).
    level = "ERROR" if args.command in _OWN_LINES_COMMANDS and env.bot_log_level != "DEBUG" else env.bot_log_level
    try:
        configure_logging(level, [*env.secrets(), *secrets_in_environment(os.environ)], log_file=log_file)
    except OSError as error:
        print(workspace_line(env.bot_workspace, str(error)), file=sys.stderr)
        return 2
    try:
        if args.command == "init":
            workspace = prepare_workspace(env)
            print(f"Workspace ready at {workspace.root.resolve()}")
        elif args.command == "run":
            if not env.reachable():
                return _nothing_to_run(env)
            asyncio.run(_run(env))
        elif args.command == "chat":
            asyncio.run(_chat(env))
        elif args.command == "status":
            asyncio.run(_status(env))
        elif args.command == "pairing":
            return asyncio.run(_pairing(env, args.pairing_command, getattr(args, "code", None)))
        elif args.command == "migrate":
            return asyncio.run(_migrate(env))
        elif args.command == "export":
            return asyncio.run(_export(env, args.folder))
        elif args.command == "doctor":
            return asyncio.run(doctor(env))
        elif args.command == "onboard":
            return asyncio.run(onboard(env, args))
        elif args.command == "memory":
            return asyncio.run(_edit_memory(env))
    except InvalidEnvironment as error:
        print(error, file=sys.stderr)
        return 2
    except (InvalidTimezone, InvalidRuntimeConfig, TelegramStartError, DatabaseError) as error:
        print(f"Cannot start: {redact(str(error), env.secrets())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

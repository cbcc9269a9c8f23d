"""Messages per second through the fake Telegram Bot API, per backend: the whole bot next to a bare echo.

For each backend (ptb, aiogram) two bots run in their own process against the same fake Bot API server
(tests/fakes/telegram_server.py) and an instant fake model (tests/fakes/openai_server.py, echo):

- bare: the library's own minimal echo bot (PTB `Application` + `MessageHandler`; aiogram `Dispatcher`),
  one `sendMessage` per message, nothing else;
- channel: our Telegram channel (updates, dedup, per-chat queues, formatting, delivery with retries)
  with an echo in place of the pipeline: what the channel itself costs;
- bot: `python -m bot run` with that backend: access check, per-chat queues, session and archive
  writes, memory, the model call, typing indicator, formatting, the reply.

Both get the same load: `--chats` chats × `--per-chat` messages pushed at once; the clock runs from the
first push until every reply arrived. Not run by CI:

    .venv/bin/python bench/telegram_throughput.py [--chats 50] [--per-chat 10] [--backends ptb aiogram]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402

FIRST_CHAT = 10_000
START_TIMEOUT_SECONDS = 60.0


def run_bare_echo(backend: str, root: str, token: str) -> None:
    """The subprocess side of a bare run: the library's minimal echo bot, until killed."""
    if backend == "ptb":
        from telegram import Update
        from telegram.ext import ApplicationBuilder, ContextTypes, MessageHandler, filters

        async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            assert update.effective_message is not None
            await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

        app = ApplicationBuilder().token(token).base_url(f"{root}/bot").base_file_url(f"{root}/file/bot").build()
        app.add_handler(MessageHandler(filters.TEXT, echo))
        app.run_polling(timeout=1)
        return

    from aiogram import Bot, Dispatcher
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message

    async def main() -> None:
        bot = Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(root)))
        dispatcher = Dispatcher()

        @dispatcher.message()
        async def echo(message: Message) -> None:
            await message.answer(f"echo: {message.text}")

        await dispatcher.start_polling(bot, polling_timeout=1)

    asyncio.run(main())


def run_channel_echo(backend: str, root: str, token: str, workspace: Path) -> None:
    """The subprocess side of a channel run: `TelegramChannel` + the per-chat queues, echoing."""
    from bot.app import Application
    from bot.channels.base import Channel
    from bot.domain.inbound import InboundMessage
    from bot.ledger.turns import Turn
    from bot.pipeline.dispatcher import ChatDispatcher
    from bot.settings import EnvSettings

    async def main() -> None:
        env = EnvSettings(
            _env_file=None,
            bot_workspace=workspace,
            telegram_bot_token=token,
            telegram_api_base_url=root,
            telegram_backend=backend,
        )
        [channel] = Application(env).configured_channels()

        async def echo(turn: Turn, channel: Channel) -> None:
            await channel.send_text(turn.inbound.chat_id, f"echo: {turn.inbound.text}")

        dispatcher = ChatDispatcher(echo)

        async def accept(inbound: InboundMessage) -> None:
            dispatcher.submit(Turn.unrecorded(inbound), channel)

        await channel.start(accept)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_bare(backend: str, fake: FakeTelegram) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--bare-echo", backend, "--root", fake.root, "--token", fake.token]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_channel(backend: str, fake: FakeTelegram, workspace: Path) -> subprocess.Popen[bytes]:
    write_runtime_config(workspace, [])
    command = [sys.executable, __file__, "--channel-echo", backend, "--root", fake.root, "--token", fake.token]
    command += ["--workspace", str(workspace)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def write_runtime_config(workspace: Path, chats: list[int], sections: dict[str, Any] | None = None) -> None:
    """The bench's runtime-config: these chats admitted, a short long poll, and `sections` over that."""
    (workspace / "preferences").mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"access": {"allowedUsers": chats}, "telegram": {"pollingTimeoutSeconds": 1}}
    config.update(sections or {})
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))


def start_bot(
    backend: str,
    fake: FakeTelegram,
    model: FakeOpenAI,
    workspace: Path,
    chats: list[int],
    config_sections: dict[str, Any] | None = None,
) -> subprocess.Popen[bytes]:
    write_runtime_config(workspace, chats, config_sections)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BOT_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        BOT_WORKSPACE=str(workspace),
        TELEGRAM_BOT_TOKEN=fake.token,
        TELEGRAM_API_BASE_URL=fake.root,
        TELEGRAM_BACKEND=backend,
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="sk-bench",
        BOT_TIMEZONE="UTC",
        BOT_LOG_LEVEL="WARNING",
    )
    command = [sys.executable, "-m", "bot", "run"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(fake: FakeTelegram, chats: list[int], per_chat: int) -> float:
    """Push the load and return messages per second once every reply arrived."""
    # Warm-up: one message per chat, answered, so start-up costs are not measured.
    fake.wait_until(lambda: bool(fake.calls_to("getUpdates")), START_TIMEOUT_SECONDS, "the bot to poll")
    for chat in chats:
        fake.push_message(chat, "warm-up")
    fake.wait_until(lambda: len(fake.sent_messages()) >= len(chats), START_TIMEOUT_SECONDS, "warm-up replies")
    expected = len(fake.sent_messages()) + len(chats) * per_chat
    started = time.perf_counter()
    for number in range(per_chat):
        for chat in chats:
            fake.push_message(chat, f"{chat}-{number}")
    fake.wait_until(lambda: len(fake.sent_messages()) >= expected, 300, "every reply")
    elapsed = time.perf_counter() - started
    return len(chats) * per_chat / elapsed


def run_one(kind: str, backend: str, chats: list[int], per_chat: int) -> float:
    with FakeTelegram() as fake, FakeOpenAI() as model, tempfile.TemporaryDirectory() as folder:
        if kind == "bare":
            process = start_bare(backend, fake)
        elif kind == "channel":
            process = start_channel(backend, fake, Path(folder) / "workspace")
        else:
            process = start_bot(backend, fake, model, Path(folder) / "workspace", chats)
        try:
            return measure(fake, chats, per_chat)
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--per-chat", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=["ptb", "aiogram"], choices=["ptb", "aiogram"])
    parser.add_argument("--bare-echo", choices=["ptb", "aiogram"], help=argparse.SUPPRESS)
    parser.add_argument("--channel-echo", choices=["ptb", "aiogram"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_echo:
        run_bare_echo(args.bare_echo, args.root, args.token)
        return
    if args.channel_echo:
        run_channel_echo(args.channel_echo, args.root, args.token, args.workspace)
        return
    chats = list(range(FIRST_CHAT, FIRST_CHAT + args.chats))
    print(f"{args.chats} chats x {args.per_chat} messages, instant model, bot in its own process")
    print(f"{'backend':<8} {'bare echo':>10} {'channel echo':>13} {'kept':>5} {'whole bot':>10} {'kept':>5}  (msg/s)")
    for backend in args.backends:
        bare = run_one("bare", backend, chats, args.per_chat)
        channel = run_one("channel", backend, chats, args.per_chat)
        whole = run_one("bot", backend, chats, args.per_chat)
        print(
            f"{backend:<8} {bare:>10.0f} {channel:>13.0f} {channel / bare:>5.0%} {whole:>10.0f} {whole / bare:>5.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()

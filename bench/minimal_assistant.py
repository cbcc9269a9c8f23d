"""The whole bot beside a minimal assistant doing the same three calls a message, in the same run.

The minimal assistant is python-telegram-bot and the `openai` client and nothing else: for each text
message it sends the typing action, streams one chat completion from the model, and replies with the
text (`sendChatAction`, one streamed `/v1/chat/completions`, `sendMessage`). Like any assistant, and
like the bot, it sends the chat's conversation so far with each message (kept in a list in RAM, never
stored or cut), so both make the same HTTP calls with the same history; `--minimal-without-history`
sends the new message alone, the reference the figures were first taken against. It handles updates
concurrently (`concurrent_updates`), the most it can do for a burst. The bot is `python -m bot run`
(python-telegram-bot backend) with the shipped settings, which makes the same three calls for a short
answer. Each runs in its own process against its own fake Bot API (tests/fakes) on 127.0.0.1 and its own
instant fake model (echo), so what one costs is never counted for the other.

Figures, medians over interleaved rounds (bot, minimal, bot, ...) so that the machine's load hits both:

- CPU per message: the process's CPU time over a round of messages sent one after another, divided by
  the round's messages;
- round trip: from the push of a message to the fake Bot API receiving its reply;
- burst: `--chats` chats × `--per-chat` messages pushed at once (each chat answered once before),
  messages per second until every reply arrived; the median of `--bursts` bursts, interleaved too
  (one burst is a second or two, and the machine's load swings more than that).

Two settings of the bot: as shipped (`memory.embeddingsModel: local`: the bundled offline embedder makes
each message's vector for memory retrieval on the reply path, and the stored items' vectors once the bot
is idle, so the rounds measure the first; in a burst a reply whose vector would queue behind another
message's is built from its words) and lexical only (`memory.embeddingsModel: null`). The difference
between the two is what the memory's embedding costs a reply; what the lexical bot costs over the
minimal one is the pipeline's own work. With both settings, the CPU of one message's vector (the bundled
embedder in this process) is printed too: the shipped bot's CPU per message is to stay within the lexical
one's plus that. The messages are short, as in a chat, so RAG indexing skips
them (`rag.minExchangeChars`). Not run by CI:

    .venv/bin/python -m bench.minimal_assistant [--rounds 15] [--per-round 40] [--chats 20] [--per-chat 5]
        [--bursts 3] [--minimal-without-history] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.process_meter import ProcessMeter, Round, median_of, sequential_round, warm_up
from bench.telegram_throughput import START_TIMEOUT_SECONDS, start_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

ROOT = Path(__file__).resolve().parent.parent
MINIMAL_MODEL = "gpt-4o-mini"
SEQUENTIAL_CHAT = 4242
FIRST_BURST_CHAT = 20_000
WARM_UP_MESSAGES = 5
# Rounds of each side. On this shared machine one side's CPU for the same round swings by half from one
# minute to the next; the ratio of medians over 5 rounds moved by 0.2 from run to run, over 15 by 0.03.
ROUNDS = 15
BURST_TIMEOUT_SECONDS = 300.0
# Messages whose vector is made to measure what one costs.
QUERY_VECTORS = 60
SETTINGS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "lexical": {"memory": {"embeddingsModel": None}},
}


def run_minimal_assistant(root: str, token: str, model_url: str, history: str) -> None:
    """The subprocess side: the minimal assistant, polling until it is terminated (`history`: "keep" or
    "none", whether each request carries the chat's conversation so far)."""
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam
    from telegram import Update
    from telegram.constants import ChatAction
    from telegram.ext import ApplicationBuilder, ContextTypes, MessageHandler, filters

    client = AsyncOpenAI(base_url=model_url, api_key="sk-bench")
    conversations: dict[int, list[ChatCompletionMessageParam]] = {}

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        assert message is not None and message.text is not None
        await context.bot.send_chat_action(message.chat_id, ChatAction.TYPING)
        conversation = conversations.setdefault(message.chat_id, []) if history == "keep" else []
        conversation.append({"role": "user", "content": message.text})
        # The messages go in `extra_body`, as the bot sends them: the library's own transform of typed
        # messages walks every one each call, which with a long conversation costs more than the rest.
        stream = await client.chat.completions.create(
            model=MINIMAL_MODEL, messages=[], extra_body={"messages": conversation}, stream=True
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        conversation.append({"role": "assistant", "content": "".join(parts)})
        await message.reply_text("".join(parts))

    app = (
        ApplicationBuilder()
        .token(token)
        .base_url(f"{root}/bot")
        .base_file_url(f"{root}/file/bot")
        .concurrent_updates(True)
        .build()
    )
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, answer))
    app.run_polling(timeout=1)


def start_minimal(fake: FakeTelegram, model: FakeOpenAI, history: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "bench.minimal_assistant",
        "--serve",
        fake.root,
        fake.token,
        model.base_url,
        history,
    ]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def burst(fake: FakeTelegram, chats: list[int], per_chat: int) -> float:
    """Messages per second for `per_chat` messages in each of `chats` pushed at once."""
    for chat in chats:
        fake.push_message(chat, "hello")
    fake.wait_until(lambda: all(fake.sent_messages(chat) for chat in chats), BURST_TIMEOUT_SECONDS, "first replies")
    expected = len(fake.sent_messages()) + len(chats) * per_chat
    started = time.perf_counter()
    for number in range(per_chat):
        for chat in chats:
            fake.push_message(chat, f"burst {number} in {chat}")
    fake.wait_until(lambda: len(fake.sent_messages()) >= expected, BURST_TIMEOUT_SECONDS, "every burst reply")
    return len(chats) * per_chat / (time.perf_counter() - started)


def compare(setting: str, arguments: argparse.Namespace) -> dict[str, Any]:
    """Both assistants side by side with one setting of the bot."""
    burst_chats = list(range(FIRST_BURST_CHAT, FIRST_BURST_CHAT + arguments.chats))
    with (
        FakeTelegram() as bot_api,
        FakeOpenAI() as bot_model,
        FakeTelegram() as minimal_api,
        FakeOpenAI() as minimal_model,
        tempfile.TemporaryDirectory() as folder,
    ):
        workspace = Path(folder) / "workspace"
        bot = start_bot("ptb", bot_api, bot_model, workspace, [SEQUENTIAL_CHAT, *burst_chats], SETTINGS[setting])
        minimal = start_minimal(minimal_api, minimal_model, "none" if arguments.minimal_without_history else "keep")
        try:
            sides = {"bot": (bot_api, ProcessMeter(bot.pid)), "minimal": (minimal_api, ProcessMeter(minimal.pid))}
            for fake, meter in sides.values():
                warm_up(fake, meter, SEQUENTIAL_CHAT, WARM_UP_MESSAGES, START_TIMEOUT_SECONDS)
            rounds: dict[str, list[Round]] = {"bot": [], "minimal": []}
            for number in range(arguments.rounds):
                texts = [f"how is the garden today? ({number}.{n})" for n in range(arguments.per_round)]
                for name, (fake, meter) in sides.items():
                    rounds[name].append(sequential_round(fake, meter, SEQUENTIAL_CHAT, texts))
            figures = {name: median_of(measured) for name, measured in rounds.items()}
            rates: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(arguments.bursts):
                for name, (fake, _) in sides.items():
                    rates[name].append(burst(fake, burst_chats, arguments.per_chat))
            for name, measured_rates in rates.items():
                figures[name]["burst_per_s"] = statistics.median(measured_rates)
        finally:
            for process in (bot, minimal):
                process.terminate()
                process.wait(timeout=30)
    bot_figures, minimal_figures = figures["bot"], figures["minimal"]
    return {
        "setting": setting,
        "bot": bot_figures,
        "minimal": minimal_figures,
        "cpu_ratio": bot_figures["cpu_ms"] / minimal_figures["cpu_ms"],
        "round_trip_ratio": bot_figures["round_trip_ms"] / minimal_figures["round_trip_ms"],
        "burst_share": bot_figures["burst_per_s"] / minimal_figures["burst_per_s"],
        "minimal_history": not arguments.minimal_without_history,
        "rounds": arguments.rounds,
        "messages_per_round": arguments.per_round,
        "round_cpu_ms": {name: [round(r.cpu_ms_per_message, 2) for r in rs] for name, rs in rounds.items()},
        "burst_rates": {name: [round(rate, 1) for rate in measured] for name, measured in rates.items()},
    }


def query_vector_cpu_ms(count: int = QUERY_VECTORS) -> float:
    """CPU of one message's vector with the bundled embedder, in this process: the median over `count`
    messages like the rounds' (each new to it), after one that loads the model."""
    from bot.llm.local_embeddings import LocalEmbedder

    async def measure() -> list[float]:
        embedder = LocalEmbedder()
        await embedder.embed_query("warm-up")
        spent = []
        for number in range(count):
            started = time.process_time()
            await embedder.embed_query(f"how is the garden today? (query {number})")
            spent.append((time.process_time() - started) * 1000)
        return spent

    return statistics.median(asyncio.run(measure()))


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--per-chat", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--json", action="store_true", help="one JSON line per setting")
    parser.add_argument(
        "--minimal-without-history", action="store_true", help="the minimal assistant sends the new message alone"
    )
    parser.add_argument("--serve", nargs=4, metavar=("ROOT", "TOKEN", "MODEL_URL", "HISTORY"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve:
        run_minimal_assistant(*arguments.serve)
        return
    print(
        f"{arguments.rounds} rounds x {arguments.per_round} messages one after another, then "
        f"{arguments.chats} chats x {arguments.per_chat} at once; load average {load_average():.2f} at start"
    )
    print(f"{'bot setting':<12} {'CPU/msg bot':>12} {'minimal':>8} {'ratio':>6}   {'round trip bot':>15} "
          f"{'minimal':>8} {'ratio':>6}   {'burst bot':>10} {'minimal':>8} {'share':>6}")  # fmt: skip
    for setting in arguments.settings:
        row = compare(setting, arguments)
        bot, minimal = row["bot"], row["minimal"]
        print(
            f"{setting:<12} {bot['cpu_ms']:>9.1f} ms {minimal['cpu_ms']:>5.1f} ms {row['cpu_ratio']:>5.2f}x   "
            f"{bot['round_trip_ms']:>12.1f} ms {minimal['round_trip_ms']:>5.1f} ms {row['round_trip_ratio']:>5.2f}x   "
            f"{bot['burst_per_s']:>6.0f}/s {minimal['burst_per_s']:>6.0f}/s {row['burst_share']:>6.0%}",
            flush=True,
        )
        if arguments.json:
            print(json.dumps(row), flush=True)
    if "lexical" in arguments.settings:
        # What the shipped bot may spend a message: the lexical pipeline's, plus its message's vector.
        print(f"one message's vector (bundled embedder, in process): {query_vector_cpu_ms():.1f} ms CPU, median")
    print(f"load average {load_average():.2f} at the end; CPU per message of each round: medians above")


if __name__ == "__main__":
    main()

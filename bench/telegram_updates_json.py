"""aiogram's getUpdates read as the Bot API's JSON, beside the same call read as aiogram's `Update` types.

The Telegram channel reads updates as JSON. Through aiogram, `get_updates` builds an `Update` model per
update (every nested object validated), which the channel turned back into JSON; the backend now asks
for the answer as JSON (`GetUpdatesAsJson`), and an update aiogram's types refuse no longer fails the
batch. Both calls go to the fake Bot API (tests/fakes/telegram_server.py) on 127.0.0.1 and fetch the
same pending batch (texts, photos with captions, forwards, replies), unacknowledged, so each round reads
it again. Prints the median time per call and per update, and their ratio. Not run by CI:

    .venv/bin/python -m bench.telegram_updates_json [--updates 100] [--rounds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiogram import Bot  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.methods import GetUpdates  # noqa: E402

from bot.channels.telegram_aiogram import GetUpdatesAsJson  # noqa: E402
from bot.channels.telegram_updates import ALLOWED_UPDATES  # noqa: E402
from tests.fakes.telegram_server import FakeTelegram  # noqa: E402


def fill(fake: FakeTelegram, count: int) -> None:
    """`count` pending updates: a text, a photo with a caption, a forward and a reply to the bot, in turn."""
    for number in range(count):
        chat = 10_000 + number % 10
        kind = number % 4
        if kind == 0:
            fake.push_message(chat, f"message {number} with a link https://example.com/{number}")
        elif kind == 1:
            fake.push_photo(chat, caption=f"photo {number}")
        elif kind == 2:
            fake.push_forwarded_message(chat, f"forwarded {number}", author="Bob")
        else:
            fake.push_message(chat, f"reply {number}", reply_to_bot=True)


async def timed(call: Any, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


async def measure(fake: FakeTelegram, count: int, rounds: int) -> None:
    bot = Bot(fake.token, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.root)))
    try:

        async def as_types() -> None:
            updates = await bot(GetUpdates(timeout=0, allowed_updates=ALLOWED_UPDATES))
            assert len([u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in updates]) == count

        async def as_json() -> None:
            updates: list[dict[str, Any]] = await bot(GetUpdatesAsJson(timeout=0, allowed_updates=ALLOWED_UPDATES))
            assert len(updates) == count

        await as_types()
        await as_json()  # warm: connections, pydantic's first validation
        typed, raw = [], []
        for _ in range(rounds // 2):  # alternated, so that a busy machine weighs on both alike
            typed += await timed(as_types, 2)
            raw += await timed(as_json, 2)
    finally:
        await bot.session.close()
    for name, times in (("Update types, dumped to JSON", typed), ("the Bot API's JSON", raw)):
        median = statistics.median(times)
        print(f"{name:30} median {median * 1000:7.2f} ms per call, {median / count * 1e6:6.1f} µs per update")
    print(f"ratio (types / JSON): {statistics.median(typed) / statistics.median(raw):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with FakeTelegram() as fake:
        fill(fake, args.updates)
        print(f"aiogram getUpdates of {args.updates} pending updates, {args.rounds} rounds each")
        asyncio.run(measure(fake, args.updates, args.rounds))


if __name__ == "__main__":
    main()

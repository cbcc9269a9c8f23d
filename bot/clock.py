"""`Clock`: the current time in the configured time zone (daily notes, dates in prompts), and the waits
and intervals of the bot's own timers (the typing indicator's refresh, a streamed reply's updates), so
that a test can move time on instead of waiting for it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class InvalidTimezone(ValueError):
    """`BOT_TIMEZONE` names no known time zone."""


def resolve_timezone(name: str | None) -> tzinfo:
    """The zone named by `BOT_TIMEZONE`, or the machine's own when unset."""
    if not name:
        return datetime.now().astimezone().tzinfo or UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise InvalidTimezone(f"BOT_TIMEZONE={name!r} is not a known time zone (e.g. Europe/Berlin)") from error


class Clock:
    """Now, in the bot's time zone; seconds since a fixed moment, to time intervals by; and a wait."""

    def __init__(self, zone: tzinfo = UTC) -> None:
        self.zone = zone

    def now(self) -> datetime:
        return datetime.now(self.zone)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

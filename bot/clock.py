"""`Clock`: the current time in the configured time zone (daily notes, dates in prompts), and the waits
and intervals of the bot's own timers (the typing indicator's refresh, a streamed reply's updates), so
that a test can move time on instead of waiting for it."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class InvalidTimezone(ValueError):
    """`BOT_TIMEZONE` names no known time zone."""


# Where a Linux machine keeps its zone: a link into the zone database, whose path names it.
MACHINE_ZONE_FILE = Path("/etc/localtime")


def resolve_timezone(name: str | None) -> tzinfo:
    """The zone named by `BOT_TIMEZONE`, or the machine's own when unset."""
    if not name:
        return machine_timezone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise InvalidTimezone(f"BOT_TIMEZONE={name!r} is not a known time zone (e.g. Europe/Berlin)") from error


def machine_timezone() -> tzinfo:
    """The machine's zone with its rules, named as the zone database names it (`Europe/Berlin`): from `TZ`,
    else from `/etc/localtime`. The offset in force now is the last resort only: kept all year, it would put
    a reminder an hour off once the clocks change."""
    # A `TZ` that is a rule rather than a name (`CET-1CEST`) is what the C library follows: left to it.
    name = os.environ.get("TZ", "").removeprefix(":") or _linked_zone_name()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return datetime.now().astimezone().tzinfo or UTC


def _linked_zone_name() -> str:
    try:
        return MACHINE_ZONE_FILE.resolve().as_posix().partition("/zoneinfo/")[2]
    except OSError:
        return ""


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

"""`Clock`: the current time in the configured time zone (daily notes, dates in prompts), and the waits
and intervals of the bot's own timers (the typing indicator's refresh, a streamed reply's updates), so
that a test can move time on instead of waiting for it."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal

log = logging.getLogger(__name__)


class InvalidTimezone(ValueError):
    """`BOT_TIMEZONE` names no known time zone."""


def resolve_timezone(name: str | None) -> tzinfo:
    """The zone named by `BOT_TIMEZONE`, or the machine's own when unset."""
    if not name:
        return machine_timezone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise InvalidTimezone(f"BOT_TIMEZONE={name!r} is not a known time zone (e.g. Europe/Berlin)") from error


def machine_timezone() -> tzinfo:
    """The machine's zone with its rules, as tzlocal finds it: `TZ` (a name, or a zone file's path), else
    the system's settings (`/etc/timezone`, `/etc/localtime` linked or copied, ...). The offset in force now
    is the last resort only: kept all year, it would put a reminder an hour off once the clocks change."""
    try:
        return tzlocal.reload_localzone()
    except (ZoneInfoNotFoundError, ValueError, OSError) as error:
        # A `TZ` that is a rule rather than a name (`CET-1CEST`), or system settings that disagree.
        log.warning(
            "[Clock] The machine's time zone cannot be followed (%s); its offset now is used all year. Set "
            "BOT_TIMEZONE to a name such as Europe/Berlin.", " ".join(str(error).split()),
        )  # fmt: skip
        return datetime.now().astimezone().tzinfo or UTC


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

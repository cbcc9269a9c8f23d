"""Cron expressions as people write them (`man 5 crontab`: 5 fields, Sunday = 0 or 7), for APScheduler."""

from __future__ import annotations

import re
from datetime import tzinfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger


class InvalidCron(ValueError):
    """A cron expression that cannot be used; the message says why."""


_WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DOW_ITEM = re.compile(r"^(\*|\d+)(?:-(\d+))?(?:/(\d+))?$")


def _standard_day_of_week(field: str) -> str:
    """Cron's day-of-week field (0 or 7 = Sunday) as weekday names.

    APScheduler 3 numbers days from Monday = 0, so a standard `1-5` (Monday to Friday) would mean
    Tuesday to Saturday there; names mean the same in both.
    """
    items: list[str] = []
    days: set[int] = set()
    for item in field.split(","):
        match = _DOW_ITEM.match(item)
        if match is None:
            items.append(item)  # a name (mon, mon-fri) means the same to APScheduler; anything else it refuses
            continue
        start, end, step = match.groups()
        if step is not None and int(step) == 0:
            raise InvalidCron(f"day of week {item!r}: a step must be 1 or more")
        if start == "*":
            if step is None:
                return field
            first, last = 0, 6
        else:
            first = int(start)
            last = int(end) if end is not None else (6 if step is not None else first)
        if not (0 <= first <= 7 and 0 <= last <= 7 and first <= last):
            raise InvalidCron(f"day of week {item!r} must be between 0 and 7")
        days.update(day % 7 for day in range(first, last + 1, int(step or 1)))
    return ",".join([_WEEKDAY_NAMES[day] for day in sorted(days)] + items)


def cron_trigger(expression: str, zone: tzinfo) -> BaseTrigger:
    """An APScheduler trigger for a standard 5-field cron expression in `zone`.

    When both day fields are restricted (neither starts with `*`), cron fires on a day that matches
    either of them (`0 9 1 * 1`: the 1st of each month, and every Monday); APScheduler's CronTrigger
    wants both, so the two are combined as one trigger for each day field.
    """
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidCron(f"{expression!r} is not a 5-field cron expression like '0 9 * * 1-5'")
    minute, hour, day, month, day_of_week = fields
    day_of_week = _standard_day_of_week(day_of_week)
    try:
        if day.startswith("*") or day_of_week.startswith("*"):
            return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=zone)
        return OrTrigger([
            CronTrigger(minute=minute, hour=hour, day=day, month=month, timezone=zone),
            CronTrigger(minute=minute, hour=hour, month=month, day_of_week=day_of_week, timezone=zone),
        ])  # fmt: skip
    except ValueError as error:
        raise InvalidCron(f"{expression!r} is not a cron expression like '0 9 * * 1-5': {error}") from error

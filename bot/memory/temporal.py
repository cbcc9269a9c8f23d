"""Time cues in a message ("yesterday", "last May", "in 2022", "3 weeks ago") as a window of dates.

Retrieval favours items made inside the window, so "what did I say last May" finds May's items even
when the words differ. English cues only; a message without one gives no window (and no bias).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}

_AGO = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b")
_LAST_UNIT = re.compile(r"\b(last|this|past|previous)\s+(week|month|year|weekend)\b")
_MONTH = re.compile(r"\b(?:(last|this|in|since|during)\s+)?(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\b"
                    r"(?:\s+(\d{4}))?")  # fmt: skip
_YEAR = re.compile(r"\b(?:in|during|since|of)\s+((?:19|20)\d{2})\b")
_WEEKDAY = re.compile(r"\b(?:last|on|this)\s+(" + "|".join(WEEKDAYS) + r")\b")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}

DateWindow = tuple[date, date]


def _month_window(year: int, month: int) -> DateWindow:
    first = date(year, month, 1)
    following = date(year + (month == 12), month % 12 + 1, 1)
    return first, following - timedelta(days=1)


def time_window(text: str, now: datetime) -> DateWindow | None:
    """The dates (first, last, inclusive) that `text` points at, or None when it names no time."""
    lowered = text.lower()
    today = now.date()
    if re.search(r"\byesterday\b", lowered):
        day = today - timedelta(days=1)
        return day, day
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b", lowered):
        return today, today
    if found := _AGO.search(lowered):
        count = int(found[1]) if found[1].isdigit() else _NUMBERS[found[1]]
        span = _UNIT_DAYS[found[2]]
        centre = today - timedelta(days=count * span)
        return centre - timedelta(days=span), centre + timedelta(days=span)
    if found := _LAST_UNIT.search(lowered):
        unit = found[2]
        recent = found[1] == "this"
        if unit in ("week", "weekend"):
            start = today - timedelta(days=today.weekday() + (0 if recent else 7))
            return start, start + timedelta(days=6)
        if unit == "month":
            month_day = today.replace(day=1) if recent else (today.replace(day=1) - timedelta(days=1))
            return _month_window(month_day.year, month_day.month)
        year = today.year if recent else today.year - 1
        return date(year, 1, 1), date(year, 12, 31)
    if found := _WEEKDAY.search(lowered):
        back = (today.weekday() - WEEKDAYS.index(found[1])) % 7 or 7
        day = today - timedelta(days=back)
        return day, day
    for found in _MONTH.finditer(lowered):
        name = found[2]
        if name == "may" and not found[1] and not found[3]:
            continue  # "may" alone is a verb far more often than a month
        if name in ("mar", "jan", "dec", "oct", "sep", "jun", "jul", "aug", "apr", "nov", "feb") and not found[1]:
            continue
        month = MONTHS[name]
        if found[3]:
            year = int(found[3])
        else:
            year = today.year if month <= today.month else today.year - 1
            if found[1] == "last" and month == today.month:
                year -= 1
        return _month_window(year, month)
    if found := _YEAR.search(lowered):
        year = int(found[1])
        return date(year, 1, 1), date(year, 12, 31)
    return None

"""Time cues in a message ("yesterday", "last May", "in 2022", "3 weeks ago") as a window of dates.

Retrieval favours items made inside the window, so "what did I say last May" finds May's items even
when the words differ. English cues only; a message without one gives no window (and no bias).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
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


# Relative dates in what was said, resolved against when it was said (`said_dates`).
_SAID_DAY = re.compile(r"\b(yesterday|last night|today|tonight|this morning|tomorrow)\b", re.IGNORECASE)
_SAID_UNIT = re.compile(r"\b(last|this|next|past|previous)\s+(week|weekend|month|year)\b", re.IGNORECASE)
_SAID_WEEKDAY = re.compile(r"\b(last|next|this past|this coming)\s+(" + "|".join(WEEKDAYS) + r")\b", re.IGNORECASE)
_SAID_AGO = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
# What a text's lower case holds wherever each of the patterns above matches in it: a pattern is searched only
# in a text with one of its pieces (most texts name no time, and a search costs far more than these checks).
# No piece holds an "i" or an "s": a case-blind match also takes "ı", "İ" and "ſ" for them, which `str.lower`
# leaves other letters.
_SAID_PIECES = (
    (_SAID_DAY, ("terday", "ght", "today", "morn", "tomorrow")),
    (_SAID_UNIT, ("week", "month", "year")),
    (_SAID_WEEKDAY, ("monday", "tue", "wedne", "thur", "fr", "aturday", "unday")),
    (_SAID_AGO, ("ago",)),
)
# The letters a case-blind match takes for "i" and "s" that `str.lower` does not turn into them.
_CASE_BLIND = str.maketrans({"ı": "i", "İ": "i", "ſ": "s"})
_DAY_OFFSETS = {"yesterday": -1, "last night": -1, "today": 0, "tonight": 0, "this morning": 0, "tomorrow": 1}


@dataclass(frozen=True)
class SaidDate:
    """A relative date in a text (`text[start:end]`), as the dates it meant when it was said."""

    start: int
    end: int
    first: date
    last: date

    def label(self) -> str:
        """The dates in words: "5 May 2023", "1-7 May 2023", "May 2023", "2023"."""
        first, last = self.first, self.last
        if first == last:
            return f"{first.day} {first:%B %Y}"
        if (first.month, first.day, last.month, last.day) == (1, 1, 12, 31) and first.year == last.year:
            return str(first.year)
        if first.day == 1 and last == _month_window(first.year, first.month)[1]:
            return f"{first:%B %Y}"
        if first.month == last.month:
            return f"{first.day}-{last.day} {last:%B %Y}"
        return f"{first.day} {first:%B} - {last.day} {last:%B %Y}"


def _unit_window(word: str, unit: str, today: date) -> DateWindow:
    step = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}[word]
    if unit == "weekend":
        saturday = today + timedelta(days=(5 - today.weekday()) % 7 - (7 if step < 0 else 0) + (7 if step > 0 else 0))
        return saturday, saturday + timedelta(days=1)
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(days=7 * step)
        return monday, monday + timedelta(days=6)
    if unit == "month":
        month = today.month - 1 + step
        return _month_window(today.year + month // 12, month % 12 + 1)
    return date(today.year + step, 1, 1), date(today.year + step, 12, 31)


def said_dates(text: str, said: datetime) -> list[SaidDate]:
    """The relative dates of `text` ("yesterday", "last Friday", "next month", "two weeks ago") as the dates
    they meant on the day `said` (in its own zone): when it was said, never when it is read."""
    lowered = text.lower()
    days, units, weekdays, agos = (
        pattern if any(map(lowered.__contains__, pieces)) else None for pattern, pieces in _SAID_PIECES
    )
    if days is None and units is None and weekdays is None and agos is None:
        return []
    today = said.date()
    found: list[SaidDate] = []
    for match in _matches(days, text):
        day = today + timedelta(days=_DAY_OFFSETS[_word(match[1])])
        found.append(SaidDate(match.start(), match.end(), day, day))
    for match in _matches(units, text):
        found.append(SaidDate(match.start(), match.end(), *_unit_window(_word(match[1]), _word(match[2]), today)))
    for match in _matches(weekdays, text):
        weekday = WEEKDAYS.index(_word(match[2]))
        if _word(match[1]) in ("next", "this coming"):
            day = today + timedelta(days=(weekday - today.weekday()) % 7 or 7)
        else:
            day = today - timedelta(days=(today.weekday() - weekday) % 7 or 7)
        found.append(SaidDate(match.start(), match.end(), day, day))
    for match in _matches(agos, text):
        count = int(match[1]) if match[1].isdigit() else _NUMBERS[_word(match[1])]
        unit = _word(match[2])
        if unit == "day":
            day = today - timedelta(days=count)
            found.append(SaidDate(match.start(), match.end(), day, day))
        elif unit == "week":
            monday = today - timedelta(days=today.weekday() + 7 * count)
            found.append(SaidDate(match.start(), match.end(), monday, monday + timedelta(days=6)))
        elif unit == "month":
            month = today.month - 1 - count
            found.append(SaidDate(match.start(), match.end(), *_month_window(today.year + month // 12, month % 12 + 1)))
        else:
            year = today.year - count
            found.append(SaidDate(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31)))
    found.sort(key=lambda said_date: said_date.start)
    return [each for n, each in enumerate(found) if n == 0 or each.start >= found[n - 1].end]


def _word(matched: str) -> str:
    """A matched word as the patterns spell it: "FRİDAY" and "laſt" match as "friday" and "last" do."""
    return matched.translate(_CASE_BLIND).lower()


def _matches(pattern: re.Pattern[str] | None, text: str) -> Iterator[re.Match[str]]:
    return iter(()) if pattern is None else pattern.finditer(text)


def with_said_dates(text: str, said: datetime) -> str:
    """`text` with each relative date followed by the dates it meant when it was said: "last Friday (5 May
    2023)". The words said stay as they were."""
    pieces = []
    position = 0
    for each in said_dates(text, said):
        pieces += [text[position : each.end], f" ({each.label()})"]
        position = each.end
    return "".join(pieces) + text[position:]

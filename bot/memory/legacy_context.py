"""The legacy memory text: `## Today's Notes` and `## Recent Context` from the daily notes.

It is what the prompt gets when the structured pack is empty (and `legacyDailyNotesEnabled`).
Recent Context covers the `recentDays` days before today, newest first, one `### YYYY-MM-DD`
subsection per day with content. Past the budget, text is cut with a marker, never dropped silently.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, timedelta

from bot.memory.budget import TextBudget
from bot.memory.daily_notes import DailyNotes

log = logging.getLogger(__name__)

_NOTE_LINE = re.compile(r"\[\d\d:\d\d\] User: (.*?) \| Assistant: ")


class NoteLines:
    """Each line of a day's notes with the user text it holds (None for another line), kept per day:
    notes that grew by appends (today's, which the bot appends to after every exchange) cost their new
    lines, not a parse of the whole day on every message. Any other change parses the day afresh."""

    def __init__(self) -> None:
        # day -> (the whole lines parsed, ending with a newline; each line and its user text)
        self._kept: dict[date, tuple[str, list[tuple[str, str | None]]]] = {}

    def of(self, day: date, notes: str) -> list[tuple[str, str | None]]:
        parsed, lines = self._kept.get(day, ("", []))
        if not notes.startswith(parsed):
            parsed, lines = "", []
        # Only whole lines are kept: a last line without its newline may still grow. Split after a
        # newline, the parts' lines are the whole's (`str.splitlines`).
        whole = notes.rfind("\n") + 1
        if whole > len(parsed):
            lines = lines + _parsed(notes[len(parsed) : whole])
            parsed = notes[:whole]
        self._kept[day] = (parsed, lines)
        return lines + _parsed(notes[whole:]) if whole < len(notes) else lines

    def __len__(self) -> int:
        """How many days are kept."""
        return len(self._kept)

    def keep_only(self, days: Collection[date]) -> None:
        """Forget the days not in `days` (those the notes no longer show)."""
        for day in [day for day in self._kept if day not in days]:
            del self._kept[day]


def _parsed(notes: str) -> list[tuple[str, str | None]]:
    return [(line, _note_user_text(line)) for line in notes.splitlines()]


@dataclass(frozen=True)
class DailyNotesView:
    day: date
    today: str
    # (day, notes) newest first, only days with content.
    recent: tuple[tuple[date, str], ...]

    @property
    def empty(self) -> bool:
        return not self.today and not self.recent

    def without(self, user_texts: Collection[str], lines: NoteLines) -> DailyNotesView:
        """The notes less the lines of exchanges whose user text (as a note line holds it) is in
        `user_texts`: those still in the live conversation, which the model is sent anyway. `lines`
        keeps the days' parsed lines from message to message."""
        lines.keep_only({self.day, *(day for day, _ in self.recent)})
        if not user_texts:
            return self

        def kept(day: date, notes: str) -> str:
            return "\n".join(line for line, user in lines.of(day, notes) if user not in user_texts)

        recent = tuple((day, text) for day, notes in self.recent if (text := kept(day, notes).strip()))
        return DailyNotesView(self.day, kept(self.day, self.today).strip(), recent)


def _note_user_text(line: str) -> str | None:
    """The user's text of a note line `[HH:mm] User: {text} | Assistant: {text}` (None for another line)."""
    found = _NOTE_LINE.match(line)
    return found[1] if found else None


async def read_daily_notes(notes: DailyNotes, today: date, recent_days: int) -> DailyNotesView:
    """Today's notes and the previous `recent_days` days'; an unreadable file counts as empty."""
    days = [today - timedelta(days=back) for back in range(recent_days + 1)]
    texts: list[str] = []
    for day, text in zip(days, await notes.read_days(days), strict=True):
        if isinstance(text, OSError):
            log.warning("[Memory] Could not read the notes of %s: %s", day, text)
            text = ""
        texts.append(text)
    recent = tuple((day, text) for day, text in zip(days[1:], texts[1:], strict=True) if text)
    return DailyNotesView(today, texts[0], recent)


def render_daily_notes(view: DailyNotesView, budget: TextBudget) -> list[str]:
    """The `## Today's Notes` and `## Recent Context` sections within `budget`."""
    sections: list[str] = []
    if view.today:
        text, _ = budget.take(view.today)
        sections.append(f"## Today's Notes\n{text}")
    if view.recent:
        days: list[str] = []
        for index, (day, notes) in enumerate(view.recent):
            if budget.remaining <= 0:
                left = len(view.recent) - index
                days.append(f"[… {left} older days not shown: over the memory prompt budget]")
                break
            text, _ = budget.take(notes)
            days.append(f"### {day.isoformat()}\n{text}")
        sections.append("## Recent Context\n" + "\n\n".join(days))
    return sections

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


@dataclass(frozen=True)
class DailyNotesView:
    today: str
    # (day, notes) newest first, only days with content.
    recent: tuple[tuple[date, str], ...]

    @property
    def empty(self) -> bool:
        return not self.today and not self.recent

    def without(self, user_texts: Collection[str]) -> DailyNotesView:
        """The notes less the lines of exchanges whose user text (as a note line holds it) is in
        `user_texts`: those still in the live conversation, which the model is sent anyway."""
        if not user_texts:
            return self

        def kept(notes: str) -> str:
            return "\n".join(line for line in notes.splitlines() if _note_user_text(line) not in user_texts)

        recent = tuple((day, text) for day, notes in self.recent if (text := kept(notes).strip()))
        return DailyNotesView(kept(self.today).strip(), recent)


def _note_user_text(line: str) -> str | None:
    """The user's text of a note line `[HH:mm] User: {text} | Assistant: {text}` (None for another line)."""
    found = _NOTE_LINE.match(line)
    return found[1] if found else None


async def read_daily_notes(notes: DailyNotes, today: date, recent_days: int) -> DailyNotesView:
    """Today's notes and the previous `recent_days` days'; an unreadable file counts as empty."""

    async def safe_read(day: date) -> str:
        try:
            return await notes.read(day)
        except OSError as error:
            log.warning("[Memory] Could not read the notes of %s: %s", day, error)
            return ""

    today_text = await safe_read(today)
    recent = []
    for back in range(1, recent_days + 1):
        day = today - timedelta(days=back)
        text = await safe_read(day)
        if text:
            recent.append((day, text))
    return DailyNotesView(today_text, tuple(recent))


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

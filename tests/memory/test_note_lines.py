"""`NoteLines`: a day's parsed note lines kept as the notes grow give what a parse from scratch gives."""

from __future__ import annotations

from datetime import date

from bot.memory.legacy_context import DailyNotesView, NoteLines

DAY = date(2026, 11, 25)


def fresh(notes: str) -> list[tuple[str, str | None]]:
    return NoteLines().of(DAY, notes)


def test_growing_edited_and_half_written_notes_parse_as_from_scratch() -> None:
    lines = NoteLines()
    notes = "# Notes\n"
    steps = [
        "[09:00] User: hello | Assistant: hi\n",
        "[09:01] User: the shed key? | Assistant: under the blue pot\n",
        "[09:02] User: half a line wit",  # a write seen before its newline
        "hout its end | Assistant: done\r\n",  # and finished, with a Windows line end
        "a hand-written line\n\n",
    ]
    for step in steps:
        notes += step
        assert lines.of(DAY, notes) == fresh(notes)
    assert [user for _, user in lines.of(DAY, notes)] == [
        None,
        "hello",
        "the shed key?",
        "half a line without its end",
        None,
        None,
    ]
    edited = notes.replace("hello", "good morning")  # a hand edit of an earlier line
    assert lines.of(DAY, edited) == fresh(edited)
    assert lines.of(DAY, "") == []


def test_lines_of_the_live_conversation_are_left_out_and_old_days_forgotten() -> None:
    lines = NoteLines()
    yesterday = date(2026, 11, 24)
    view = DailyNotesView(
        DAY,
        "[10:00] User: still live | Assistant: yes\n[08:00] User: earlier | Assistant: ok\n",
        ((yesterday, "[22:00] User: still live | Assistant: yes\n"),),
    )
    left = view.without({"still live"}, lines)
    assert left.today == "[08:00] User: earlier | Assistant: ok" and left.recent == ()
    assert len(lines) == 2
    DailyNotesView(date(2026, 11, 26), "", ()).without({"still live"}, lines)  # the next day
    assert len(lines) == 1

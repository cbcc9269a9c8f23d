"""The summarizer's pure parts: what it reads, and which answers count as a summary."""

from __future__ import annotations

import pytest

from bot.compaction.summarizer import (
    CAP_MARKER,
    SummaryFailed,
    cap_summary,
    serialize_for_summary,
    strip_header,
    validate_summary,
)
from bot.domain.message import Message, ToolCall
from tests.compaction.helpers import structured_summary


def test_serialization_labels_roles_shows_tool_calls_and_cuts_long_messages() -> None:
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "notes.txt"}')
    blocks = serialize_for_summary(
        [
            Message.user("what is in notes.txt?"),
            Message.assistant("", tool_calls=[call]),
            Message.tool_result(call, "x" * 500),
            Message.assistant("It lists groceries."),
        ],
        max_chars_per_message=100,
    )
    assert blocks[0] == "**User:** what is in notes.txt?"
    assert blocks[1] == '**Assistant:** \n[called read_file({"path": "notes.txt"})]'
    assert blocks[2] == "**Tool result (read_file):** " + "x" * 100 + " […]"
    assert blocks[3] == "**Assistant:** It lists groceries."


def test_a_structured_summary_is_accepted_without_its_header() -> None:
    text = structured_summary(["FACT-1 cat name is TOM"])
    assert validate_summary("[Conversation summary]\n" + text, 150, 6000) == text.strip()
    assert strip_header("[Conversation summary]\nabc") == "abc"


@pytest.mark.parametrize(
    "answer",
    ["", "OK.", "I cannot summarize this conversation. " * 10, "## Goal\n" + "words " * 100],
)
def test_short_or_unstructured_answers_are_refused(answer: str) -> None:
    with pytest.raises(SummaryFailed):
        validate_summary(answer, 150, 6000)


def test_a_summary_over_its_cap_is_cut_at_a_line_with_a_marker() -> None:
    text = structured_summary([f"FACT-{n} thing is X{n}" for n in range(100)])
    capped = cap_summary(text, 1000)
    assert len(capped) <= 1000 and capped.endswith(CAP_MARKER)
    assert text.startswith(capped.removesuffix(CAP_MARKER).rstrip("\n"))

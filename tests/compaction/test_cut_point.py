"""Cut points: whole turns only, so no user message loses its answer and no tool call its result."""

from __future__ import annotations

import pytest

from bot.compaction.cut_point import find_cut_point, turn_starts
from bot.context.estimator import TokenEstimator
from bot.domain.message import Message, Role, ToolCall

estimator = TokenEstimator()


def tool_turn(number: int) -> list[Message]:
    """A turn where the assistant calls two tools before answering."""
    calls = [ToolCall(id=f"c{number}a", name="read_file", arguments='{"path": "a"}'),
             ToolCall(id=f"c{number}b", name="search_history", arguments='{"query": "b"}')]  # fmt: skip
    return [
        Message.user(f"question {number} " + "q" * 80),
        Message.assistant("", tool_calls=calls),
        Message.tool_result(calls[0], "result a " + "r" * 300),
        Message.tool_result(calls[1], "result b " + "r" * 300),
        Message.assistant(f"answer {number} " + "a" * 80),
    ]


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for number in range(turns):
        if number % 2:
            messages += tool_turn(number)
        else:
            messages += [Message.user(f"question {number} " + "q" * 80), Message.assistant(f"answer {number}")]
    return messages


def assert_whole_turns(kept: list[Message]) -> None:
    assert kept[0].role is Role.USER
    call_ids = {call.id for m in kept for call in m.tool_calls or []}
    result_ids = {m.tool_call_id for m in kept if m.role is Role.TOOL}
    assert result_ids == call_ids  # every kept call has its result, every kept result its call


@pytest.mark.parametrize("keep_tokens", [1, 50, 120, 200, 333, 500, 800])
@pytest.mark.parametrize("snap", ["fewer", "more"])
def test_every_cut_falls_between_whole_turns(keep_tokens: int, snap: str) -> None:
    messages = conversation(10)
    cut = find_cut_point(messages, estimator, keep_tokens=keep_tokens, snap=snap)  # type: ignore[arg-type]
    assert cut in turn_starts(messages)
    assert_whole_turns(messages[cut:])
    assert_whole_turns(messages[:cut]) if cut else None


def test_fewer_stays_within_the_budget_and_more_keeps_at_least_what_was_asked() -> None:
    messages = conversation(10)
    fewer = find_cut_point(messages, estimator, keep_tokens=400, snap="fewer")
    more = find_cut_point(messages, estimator, keep_tokens=400, snap="more")
    assert estimator.messages(messages[fewer:]) <= 400 < estimator.messages(messages[more:])
    assert more < fewer


def test_keep_messages_counts_messages_and_snaps_to_a_turn() -> None:
    messages = conversation(4)  # turns of 2, 5, 2, 5 messages
    assert find_cut_point(messages, estimator, keep_messages=5, snap="fewer") == 9
    assert find_cut_point(messages, estimator, keep_messages=6, snap="more") == 7
    assert find_cut_point(messages, estimator, keep_messages=2, snap="more", keep_last_turn=False) == 9


def test_the_newest_turn_always_stays_even_when_it_is_over_the_budget() -> None:
    messages = conversation(3) + tool_turn(99)
    cut = find_cut_point(messages, estimator, keep_tokens=1, snap="fewer")
    assert cut == turn_starts(messages)[-1]
    assert messages[cut].content.startswith("question 99")


def test_nothing_to_compact_when_everything_fits_or_there_is_one_turn() -> None:
    messages = conversation(3)
    assert find_cut_point(messages, estimator, keep_tokens=100_000) == 0
    assert find_cut_point(tool_turn(1), estimator, keep_tokens=1) == 0
    assert find_cut_point([], estimator, keep_tokens=1) == 0


def test_keep_nothing_compacts_everything_when_asked() -> None:
    messages = conversation(3)
    assert find_cut_point(messages, estimator, keep_messages=0, snap="more", keep_last_turn=False) == len(messages)

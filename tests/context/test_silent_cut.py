"""`SilentCuts`: a usage reading judged against the largest prompt answered whole and the conversation's growth."""

from __future__ import annotations

from bot.context.silent_cut import MIN_SLACK_TOKENS, SilentCuts, Verdict
from bot.llm.wire import WireSize


def estimate(size: WireSize) -> int:
    return size.chars // 4  # the endpoint counts 4 characters a token too


def judge(cuts: SilentCuts, chars: int, reported: int, conversation: str = "telegram:1") -> Verdict:
    return cuts.judge("m", conversation, WireSize(10, chars, 0), reported, estimate, 0.85, True).verdict


def test_a_conversation_that_loses_a_message_is_cut_and_one_that_grows_is_whole() -> None:
    cuts = SilentCuts()
    assert judge(cuts, 20_000, 5_000) is Verdict.WHOLE
    assert judge(cuts, 21_000, 5_250) is Verdict.WHOLE
    # 1,000 characters more, and a message of ~270 tokens dropped: 20 tokens more than the previous reading.
    assert judge(cuts, 22_000, 5_270) is Verdict.CUT
    spread = cuts.spread("m")
    assert spread.readings == 2 and spread.largest_whole == 5_250  # the cut reading is not one of them


def test_a_reading_a_little_short_of_the_bound_is_doubtful_and_not_kept() -> None:
    cuts = SilentCuts()
    judge(cuts, 20_000, 5_000)
    least = 5_000 + round(6_000 / 6)  # 6,000 characters more, at most 6 characters a token
    assert judge(cuts, 26_000, least - MIN_SLACK_TOKENS + 10) is Verdict.DOUBTFUL
    assert cuts.spread("m").readings == 1
    assert cuts.spread("m").slack == 2 * (MIN_SLACK_TOKENS - 10)  # the slack widens with what was seen


def test_a_request_no_larger_than_one_answered_whole_is_never_cut() -> None:
    cuts = SilentCuts()
    judge(cuts, 40_000, 10_000, conversation="telegram:1")
    # Another chat, its first request, reported at 70% of the estimate: under the largest answered whole.
    assert judge(cuts, 30_000, 5_250, conversation="telegram:2") is Verdict.WHOLE


def test_without_a_previous_reading_a_report_far_under_the_typical_residual_is_cut() -> None:
    cuts = SilentCuts()
    judge(cuts, 8_000, 2_000, conversation="telegram:1")
    assert judge(cuts, 40_000, 6_000, conversation="telegram:2") is Verdict.CUT

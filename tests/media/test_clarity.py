"""`judge_clarity` on its own: Whisper's confidence when it gives segments, words per second when not."""

from __future__ import annotations

from bot.llm.client import Transcript, TranscriptSegment
from bot.media.clarity import judge_clarity
from bot.settings import MediaConfig

CONFIG = MediaConfig()  # avg log-probability -1.0, no-speech 0.6, 0.5 words a second


def segment(start: float, end: float, logprob: float = -0.2, no_speech: float = 0.01) -> TranscriptSegment:
    return TranscriptSegment(start=start, end=end, avg_logprob=logprob, no_speech_prob=no_speech)


def test_confident_segments_are_clear_and_a_low_mean_log_probability_is_not() -> None:
    assert not judge_clarity(Transcript("hello there", segments=(segment(0, 2),)), 2.0, CONFIG).unclear
    # The mean is weighted by length: a long unsure stretch outweighs a short sure one.
    mumbled = Transcript("uh", segments=(segment(0, 1, logprob=-0.1), segment(1, 5, logprob=-1.5)))
    verdict = judge_clarity(mumbled, 5.0, CONFIG)
    assert verdict.unclear and "log-probability -1.22" in verdict.reason
    # The same stretches the other way round are clear.
    sure = Transcript("uh", segments=(segment(0, 4, logprob=-0.1), segment(4, 5, logprob=-1.5)))
    assert not judge_clarity(sure, 5.0, CONFIG).unclear


def test_half_of_it_probably_not_speech_is_unclear_however_sure_the_words() -> None:
    noise = Transcript("thanks", segments=(segment(0, 2), segment(2, 4, logprob=-0.1, no_speech=0.9)))
    verdict = judge_clarity(noise, 4.0, CONFIG)
    assert verdict.unclear and verdict.reason == "50% of it is probably not speech"
    less = Transcript("thanks", segments=(segment(0, 3), segment(3, 4, no_speech=0.9)))
    assert not judge_clarity(less, 4.0, CONFIG).unclear


def test_a_segment_of_no_length_still_counts_and_divides_nothing_by_zero() -> None:
    verdict = judge_clarity(Transcript("hm", segments=(segment(1, 1, logprob=-2.0),)), None, CONFIG)
    assert verdict.unclear and "log-probability -2.00" in verdict.reason


def test_without_segments_too_few_words_for_the_clip_is_unclear() -> None:
    assert judge_clarity(Transcript("yes"), 20.0, CONFIG).unclear  # 1 word where 10 were expected
    assert not judge_clarity(Transcript("one two three four five six seven eight nine ten"), 20.0, CONFIG).unclear
    # A short clip expects fewer than two words: "Yes." in 3 s is fine.
    assert not judge_clarity(Transcript("yes"), 3.0, CONFIG).unclear
    # The transcript's own duration wins over the channel's.
    assert judge_clarity(Transcript("yes", duration_seconds=30.0), 3.0, CONFIG).reason == "1 words for 30 s of audio"


def test_with_nothing_to_judge_by_a_transcript_is_taken_as_clear() -> None:
    assert not judge_clarity(Transcript(""), None, CONFIG).unclear
    assert not judge_clarity(Transcript(""), 0.0, CONFIG).unclear

"""Whether a transcript is clear enough to answer without showing it back first.

With Whisper's segments (`verbose_json`), the transcription model's own confidence decides, with
Whisper's own thresholds as defaults: a transcript is unclear when the segments' mean log-probability
(weighted by length) is below `media.unclearAvgLogprob`, or when segments that are probably not speech
(`no_speech_prob` above `media.unclearNoSpeechProb`) cover at least half of it. Without segments (an
endpoint that refuses `verbose_json` or leaves them out) only a plain signal is left: a clip long enough
to hold two words at `media.unclearMinWordsPerSecond` that yields fewer words than that rate gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.llm.client import Transcript, TranscriptSegment
from bot.settings import MediaConfig

# Below this many expected words the words-per-second signal says nothing ("Yes." in a 3 s clip is fine).
MIN_EXPECTED_WORDS = 2.0


@dataclass(frozen=True)
class Clarity:
    """The verdict on a transcript: `unclear`, and why (for the log)."""

    unclear: bool
    reason: str


def judge_clarity(transcript: Transcript, clip_seconds: float | None, config: MediaConfig) -> Clarity:
    """How sure the bot can be that `transcript` is what was said; `clip_seconds` as the channel gave it."""
    if transcript.segments:
        return _by_confidence(transcript.segments, config)
    duration = transcript.duration_seconds or clip_seconds
    if duration is None or duration <= 0:
        return Clarity(False, "no confidence or duration to judge by")
    words = len(transcript.text.split())
    expected = duration * config.unclear_min_words_per_second
    if expected >= MIN_EXPECTED_WORDS and words < expected:
        return Clarity(True, f"{words} words for {duration:.0f} s of audio")
    return Clarity(False, f"{words} words for {duration:.0f} s of audio")


def _by_confidence(segments: tuple[TranscriptSegment, ...], config: MediaConfig) -> Clarity:
    # A segment of zero length (some servers give start == end) still counts, as a little.
    weights = [max(segment.end - segment.start, 0.01) for segment in segments]
    total = sum(weights)
    weighted = list(zip(weights, segments, strict=True))
    logprob = sum(w * segment.avg_logprob for w, segment in weighted) / total
    silent = sum(w for w, segment in weighted if segment.no_speech_prob > config.unclear_no_speech_prob)
    if silent / total >= 0.5:
        return Clarity(True, f"{silent / total:.0%} of it is probably not speech")
    if logprob < config.unclear_avg_logprob:
        return Clarity(True, f"mean log-probability {logprob:.2f}")
    return Clarity(False, f"mean log-probability {logprob:.2f}")

"""`SilentCuts`: tells a prompt the endpoint cut without a word from the estimate's own error.

An endpoint past its window may drop the oldest messages and answer from the rest (Ollama past
`num_ctx`); the only sign is its usage: it reports fewer prompt tokens than were sent. The estimate of
what was sent is a characters-per-token ratio, off by a few percent from one prompt to the next, and a
cut of one message out of a long prompt is a few percent too. So a reading is judged by what the bot
knows of the model on this endpoint, from the prompts it answered whole:

- the largest prompt it answered whole: its window is at least that, so a request that the recent
  residuals (reported / estimated) put at or under it was not cut, whatever the reading;
- a conversation's prompt grows turn by turn: a request that holds more characters than the previous
  one of its conversation costs at least that one's reported tokens, plus the added characters at the
  most characters a token any text takes (`MAX_CHARS_PER_TOKEN`), the repeats of a run of one character
  (indentation, a rule of dashes: `WireSize.repeated`) not counted. A cut drops whole messages and
  reports less than that bound by about a message; a whole prompt falls short of it only by what the
  rebuilt parts (memory, the time line) changed, which the slack covers: `MIN_SLACK_TOKENS`, or twice
  the largest shortfall a prompt not judged a cut showed;
- without a previous reading of the conversation to grow from (its first request, or one after
  compaction shrank it), a reading under `silentCutRatio` of the typical residual is a cut.

A reading judged a cut teaches the window; one judged doubtful (short of the bound by more than half
the slack) teaches nothing: neither is fed into the estimator's calibration, which a cut prompt's
usage would pull towards under-estimating the next prompts.
"""

from __future__ import annotations

import enum
import statistics
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.context.estimator import MAX_CHARS_PER_TOKEN
from bot.llm.wire import WireSize

# A silent cut is looked for only in requests at least this large: a small one's estimate is mostly framing.
MIN_SILENT_CUT_TOKENS = 1000
# Until the estimate is calibrated by this many reports, a reading without a conversation to compare it with
# is a cut only under `UNCALIBRATED_CUT_RATIO` of the estimate: the first estimates may be off by a tokenizer's
# difference from the starting ratio.
CALIBRATED_SAMPLES = 3
UNCALIBRATED_CUT_RATIO = 0.5
# The least slack of the growth bound, in tokens: under a short paragraph, so a cut of one message shows.
MIN_SLACK_TOKENS = 96
# How many whole readings of a model the residuals and shortfalls are taken over.
RECENT_READINGS = 64
# The conversations whose last whole reading is kept per model (the least recently seen are let go).
CONVERSATIONS_KEPT = 256


class Verdict(enum.Enum):
    """What a usage reading shows: the prompt arrived whole, it was cut, or it cannot be told (not used)."""

    WHOLE = "whole"
    CUT = "cut"
    DOUBTFUL = "doubtful"


@dataclass(frozen=True)
class Judgement:
    """A reading's verdict and, for a cut, what showed it (the end of the log line)."""

    verdict: Verdict
    evidence: str = ""


@dataclass(frozen=True)
class ResidualSpread:
    """The spread of a model's recent whole readings: reported / estimated (lowest, median, highest), the
    largest shortfall a prompt not judged cut showed against its conversation's growth bound (negative: every
    one came above the bound by at least that many tokens), the slack used, and the largest prompt answered whole."""

    readings: int
    lowest: float
    median: float
    highest: float
    largest_shortfall: int
    slack: int
    largest_whole: int


@dataclass(frozen=True)
class _Reading:
    size: WireSize
    reported: int


@dataclass
class _ModelReadings:
    residuals: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_READINGS))
    shortfalls: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_READINGS))
    largest_whole: int = 0
    last: OrderedDict[str, _Reading] = field(default_factory=OrderedDict)

    def typical_residual(self) -> float:
        return statistics.median(self.residuals) if self.residuals else 1.0

    def slack(self) -> int:
        return max(MIN_SLACK_TOKENS, 2 * max(self.shortfalls, default=0))


class SilentCuts:
    """Judges each usage reading of a model on one endpoint: whole, cut or doubtful (see the module)."""

    def __init__(self) -> None:
        self._models: dict[str, _ModelReadings] = {}

    def judge(
        self,
        model: str,
        conversation: str | None,
        size: WireSize,
        reported: int,
        estimate: Callable[[WireSize], int],
        cut_ratio: float,
        calibrated: bool,
    ) -> Judgement:
        """The verdict on `reported` prompt tokens for a request of `size` (its tool schemas' characters
        included) in `conversation` (None: a request of its own, such as a summary's, that no later one grows
        from); `estimate` gives a size's tokens at the model's current ratio."""
        readings = self._models.setdefault(model, _ModelReadings())
        estimated = max(1, estimate(size))
        residual = reported / estimated
        typical = readings.typical_residual()
        previous = readings.last.get(conversation) if conversation is not None else None
        shortfall: int | None = None
        judgement = Judgement(Verdict.WHOLE)
        if size.image_parts or estimated < MIN_SILENT_CUT_TOKENS or typical * estimated <= readings.largest_whole:
            pass  # a request with images is counted by the provider's own rule; a smaller one fitted before
        elif previous is not None and size.dense_chars >= previous.size.dense_chars:
            added = size.dense_chars - previous.size.dense_chars
            least = previous.reported + added / MAX_CHARS_PER_TOKEN
            shortfall = round(least - reported)
            slack = readings.slack()
            if shortfall > slack:
                judgement = Judgement(
                    Verdict.CUT,
                    f"it reported {reported} prompt tokens for a request of ~{estimated}, {shortfall} fewer than the "
                    f"least it could be ({previous.reported} for the conversation's previous request, and "
                    f"{added} characters more)",
                )
            elif 2 * shortfall > slack:
                judgement = Judgement(Verdict.DOUBTFUL)
        else:
            ratio = cut_ratio if calibrated else min(cut_ratio, UNCALIBRATED_CUT_RATIO)
            if residual < ratio * typical:
                judgement = Judgement(
                    Verdict.CUT,
                    f"it reported {reported} prompt tokens for a request of ~{estimated}, under {ratio:.2f} of the "
                    f"{typical:.2f} it reports of an estimate",
                )
        if shortfall is not None and judgement.verdict is not Verdict.CUT:
            readings.shortfalls.append(shortfall)  # a doubtful one too: the slack widens with the noise
        if judgement.verdict is Verdict.WHOLE:
            readings.residuals.append(residual)
            readings.largest_whole = max(readings.largest_whole, reported)
            if conversation is not None:
                readings.last[conversation] = _Reading(size, reported)
                readings.last.move_to_end(conversation)
                if len(readings.last) > CONVERSATIONS_KEPT:
                    readings.last.popitem(last=False)
        return judgement

    def spread(self, model: str) -> ResidualSpread:
        """What the judgements of `model` rely on, as it stands."""
        readings = self._models.get(model, _ModelReadings())
        residuals = list(readings.residuals) or [1.0]
        return ResidualSpread(
            readings=len(readings.residuals),
            lowest=min(residuals),
            median=statistics.median(residuals),
            highest=max(residuals),
            largest_shortfall=max(readings.shortfalls, default=0),  # 0: no growth compared yet
            slack=readings.slack(),
            largest_whole=readings.largest_whole,
        )

"""Cutting memory text to a token budget, visibly: what does not fit is replaced by a marker."""

from __future__ import annotations

from bot.context.estimator import TokenEstimator


def cut_marker(hidden_chars: int) -> str:
    return f"[… {hidden_chars} more characters cut: over the memory prompt budget]"


class TextBudget:
    """A running budget in tokens (estimated with the one `TokenEstimator`)."""

    def __init__(self, tokens: int, estimator: TokenEstimator, model: str | None = None) -> None:
        self.remaining = max(tokens, 0)
        self._estimator = estimator
        # The model the prompt goes to: its calibrated ratio (or exact tokenizer) is what the prompt
        # plan measures the section with afterwards, so choosing with it leaves nothing to cut.
        self._model = model

    def cost(self, text: str) -> int:
        return self._estimator.text(text, self._model)

    def take(self, text: str) -> tuple[str, bool]:
        """`text` whole if it fits, else its head and a cut marker; returns (text, was_cut)."""
        cost = self.cost(text)
        if cost <= self.remaining:
            self.remaining -= cost
            return text, False
        max_chars = int(self.remaining * self._estimator.ratio_for(self._model))
        marker = cut_marker(len(text))
        keep = max_chars - len(marker) - 1
        if keep <= 0:
            self.remaining = 0
            return (marker if max_chars >= len(marker) else ""), True
        head = text[:keep].rstrip()
        cut = head + "\n" + cut_marker(len(text) - len(head))
        self.remaining = max(self.remaining - self.cost(cut), 0)
        return cut, True

"""`TokenSpending`: the tokens model calls cost, by what they were for, today and in total.

Every chat call names its purpose (`ChatRequest.purpose`): a reply, indexing the knowledge graph,
compacting a conversation, extracting memory items, or something else. The counts come from the
provider's `usage` where it reports one; a provider that reports none is counted with the bot's
estimate (the request's characters over the model's characters-per-token ratio), and the calls
counted so are kept apart, so `/status` can say how much is estimated. The figures are kept in
`state/token-spending.json` in the workspace, written a moment after a call (and when the client
closes), so the totals survive a restart; "today" is the day in the bot's time zone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal, get_args

from bot.domain.turn import Usage
from bot.llm.wire import wire_chars
from bot.storage.files import read_state_sync, write_atomic

log = logging.getLogger(__name__)

Purpose = Literal["reply", "indexing", "compaction", "memory", "other"]
PURPOSES: tuple[Purpose, ...] = get_args(Purpose)
# How /status names each purpose.
PURPOSE_LABELS: dict[Purpose, str] = {
    "reply": "replies",
    "indexing": "indexing",
    "compaction": "compaction",
    "memory": "memory items",
    "other": "other",
}
# A call's figures are written this long after it, with any others that came meanwhile.
SAVE_DELAY_SECONDS = 2.0


@dataclass
class TokenCount:
    """Tokens of some calls: prompt (of which cached) and completion, how many calls, how many estimated."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    calls: int = 0
    estimated_calls: int = 0

    def add(self, prompt: int, completion: int, cached: int, estimated: bool) -> None:
        self.prompt += prompt
        self.completion += completion
        self.cached += cached
        self.calls += 1
        self.estimated_calls += int(estimated)

    def to_json(self) -> dict[str, int]:
        return {
            "promptTokens": self.prompt,
            "completionTokens": self.completion,
            "cachedTokens": self.cached,
            "calls": self.calls,
            "estimatedCalls": self.estimated_calls,
        }

    @classmethod
    def from_json(cls, data: object) -> TokenCount:
        if not isinstance(data, dict):
            return cls()
        return cls(
            *(
                _count(data.get(key))
                for key in ("promptTokens", "completionTokens", "cachedTokens", "calls", "estimatedCalls")
            )
        )


@dataclass
class SpendingPeriod:
    """The counts of one period (a day, or everything), per purpose."""

    by_purpose: dict[Purpose, TokenCount] = field(default_factory=lambda: {p: TokenCount() for p in PURPOSES})

    def to_json(self) -> dict[str, Any]:
        return {purpose: count.to_json() for purpose, count in self.by_purpose.items() if count.calls}

    @classmethod
    def from_json(cls, data: object) -> SpendingPeriod:
        period = cls()
        if isinstance(data, dict):
            for purpose in PURPOSES:
                period.by_purpose[purpose] = TokenCount.from_json(data.get(purpose))
        return period

    def describe(self) -> str:
        """`replies 12,345 in / 678 out; indexing 2,100 in / 300 out` (purposes without a call left out)."""
        parts = [
            f"{PURPOSE_LABELS[purpose]} {count.prompt:,} in / {count.completion:,} out"
            for purpose, count in self.by_purpose.items()
            if count.calls
        ]
        return "; ".join(parts) if parts else "none"


class TokenSpending:
    """The bot's token spending by purpose, today and in total, kept in the workspace."""

    def __init__(self, path: Path, today: Callable[[], date], chars_per_token: Callable[[str], float]) -> None:
        self._path = path
        self._today = today
        self._chars_per_token = chars_per_token
        self._day = today()
        self.today = SpendingPeriod()
        self.total = SpendingPeriod()
        self._saving: asyncio.Task[None] | None = None
        self._load()

    def _load(self) -> None:
        data = read_state_sync(self._path, "LLM", "token spending counts from zero")
        self.total = SpendingPeriod.from_json(data.get("total"))
        if data.get("day") == self._day.isoformat():
            self.today = SpendingPeriod.from_json(data.get("today"))

    def count_call(
        self, purpose: Purpose, model: str, usage: Usage | None, messages: list[dict[str, Any]], answer: str
    ) -> None:
        """Count one call by the provider's `usage`, or by the estimate when the provider gave none."""
        if usage is not None:
            self.record(purpose, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, estimated=False)
            return
        ratio = self._chars_per_token(model)
        self.record(purpose, round(wire_chars(messages) / ratio), round(len(answer) / ratio), 0, estimated=True)

    def record(self, purpose: Purpose, prompt: int, completion: int, cached: int, *, estimated: bool) -> None:
        """Count one call; it is written to the workspace shortly after."""
        self._roll_day()
        for period in (self.today, self.total):
            period.by_purpose[purpose].add(prompt, completion, cached, estimated)
        if self._saving is None or self._saving.done():
            with contextlib.suppress(RuntimeError):  # no running loop: written at close
                self._saving = asyncio.get_running_loop().create_task(self._save_soon(), name="token spending save")

    def describe(self) -> str:
        """What /status shows: today's and the total split, and how much of it is estimated."""
        self._roll_day()
        estimated = sum(count.estimated_calls for count in self.total.by_purpose.values())
        calls = sum(count.calls for count in self.total.by_purpose.values())
        source = "as the provider reported" if not estimated else f"{estimated} of {calls} calls estimated"
        return f"Tokens today: {self.today.describe()}\nTokens in total: {self.total.describe()} ({source})"

    def by_period(self) -> dict[str, dict[str, TokenCount]]:
        """`/metrics`' view: `today` and `total`, each by purpose."""
        self._roll_day()
        return {
            name: {str(purpose): count for purpose, count in period.by_purpose.items()}
            for name, period in (("today", self.today), ("total", self.total))
        }

    def _roll_day(self) -> None:
        today = self._today()
        if today != self._day:
            self._day, self.today = today, SpendingPeriod()

    async def _save_soon(self) -> None:
        await asyncio.sleep(SAVE_DELAY_SECONDS)
        await self.save()

    async def save(self) -> None:
        data = {"day": self._day.isoformat(), "today": self.today.to_json(), "total": self.total.to_json()}
        try:
            await write_atomic(self._path, json.dumps(data, indent=1).encode("utf-8"))
        except OSError as error:
            log.warning("[LLM] Could not write %s: %s", self._path, error)

    async def close(self) -> None:
        """Write what is counted now (a save waiting for its moment is done at once)."""
        if self._saving is not None and not self._saving.done():
            self._saving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._saving
        await self.save()


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0

"""`BotMetrics`: the counters `/metrics` serves in Prometheus text format (prometheus-client).

One registry per running bot, passed to what it measures; nothing is process-global, so tests and
several bots in one process never mix their figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class _QueueDepthCollector(Collector):
    """Messages waiting per chat, read when scraped (only chats with a queue appear)."""

    def __init__(self, read_depths: Callable[[], dict[str, int]]) -> None:
        self._read_depths = read_depths

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("bot_chat_queue_depth", "Messages waiting per chat", labels=["chat"])
        for chat, depth in self._read_depths().items():
            family.add_metric([chat], depth)
        yield family


class TokenFigures(Protocol):
    """Token counts of some calls (`bot.llm.spending.TokenCount`)."""

    prompt: int
    completion: int
    cached: int


class _TokenSpendingCollector(Collector):
    """Tokens spent by purpose (replies, indexing, compaction ...), today and in total, read when scraped:
    the totals outlive a restart, which a counter of this process would not."""

    def __init__(self, read: Callable[[], Mapping[str, Mapping[str, TokenFigures]]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "bot_tokens_spent", "Model tokens spent by purpose", labels=["purpose", "direction", "period"]
        )
        for period, by_purpose in self._read().items():
            for purpose, figures in by_purpose.items():
                family.add_metric([purpose, "prompt", period], figures.prompt)
                family.add_metric([purpose, "completion", period], figures.completion)
                family.add_metric([purpose, "cached", period], figures.cached)
        yield family


class BotMetrics:
    """What the bot counts: messages, stage durations, model calls and tokens, tools, compactions, errors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.messages_in = Counter("bot_messages_in", "Messages received", ["channel"], registry=registry)
        self.replies_out = Counter("bot_replies_out", "Replies delivered", ["channel"], registry=registry)
        self.stage_seconds = Histogram(
            "bot_pipeline_stage_seconds", "Time spent in each pipeline system", ["stage"], registry=registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip
        self.model_calls = Counter("bot_model_calls", "Model calls by outcome", ["model", "outcome"], registry=registry)
        self.model_tokens = Counter(
            "bot_model_tokens", "Tokens the provider reported", ["model", "direction"], registry=registry
        )
        self.tool_calls = Counter("bot_tool_calls", "Tool calls by outcome", ["tool", "outcome"], registry=registry)
        self.compactions = Counter("bot_compactions", "Session compactions", ["trigger"], registry=registry)
        self.errors = Counter("bot_errors", "Errors by kind", ["kind"], registry=registry)

    def watch_queues(self, read_depths: Callable[[], dict[str, int]]) -> None:
        self.registry.register(_QueueDepthCollector(read_depths))

    def watch_spending(self, read: Callable[[], Mapping[str, Mapping[str, TokenFigures]]]) -> None:
        """Serve the token spending `read()` gives: by period (`today`, `total`), then by purpose."""
        self.registry.register(_TokenSpendingCollector(read))

    def render(self) -> bytes:
        return generate_latest(self.registry)

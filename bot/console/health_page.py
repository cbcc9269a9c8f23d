"""The health page: messages, reply time, tokens and the cached share, from the bot's metrics (totals since
the start) and its recent turns (over time); the MCP servers; the chats' queues."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from bot.console.html import bar, esc, table
from bot.console.server import Visit
from bot.metrics import BotMetrics
from bot.pipeline.traces import TurnTraces
from bot.tools.mcp import McpManager

# The recent turns drawn, of every chat.
RECENT_TURNS = 50


def _totals(metrics: BotMetrics) -> dict[str, dict[tuple[str, ...], float]]:
    """Each sample's value by name, then by its label values."""
    found: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for family in metrics.registry.collect():
        for sample in family.samples:
            found[sample.name][tuple(sample.labels.values())] = sample.value
    return found


@dataclass(frozen=True)
class HealthPage:
    metrics: BotMetrics
    traces: TurnTraces
    mcp: McpManager
    queue_depths: Callable[[], dict[str, int]]
    # With replicas on one database, the id of this one: its metrics and queues are its own, the recent turns
    # every replica's.
    replica: str | None = None

    async def show(self, visit: Visit) -> web.StreamResponse:
        totals = _totals(self.metrics)
        received = sum(totals.get("bot_messages_in_total", {}).values())
        replied = sum(totals.get("bot_replies_out_total", {}).values())
        tokens: dict[str, float] = defaultdict(float)
        for labels, value in totals.get("bot_model_tokens_total", {}).items():
            tokens[labels[-1]] += value
        since = "Since the start" if self.replica is None else f"Since this replica ({esc(self.replica[:8])}) started"
        body = [
            f'<p class="totals">{since}: <strong id="messages-in">{received:.0f}</strong> messages in, '
            f"<strong>{replied:.0f}</strong> replies out; model tokens: "
            + ", ".join(f"{esc(direction)} {value:,.0f}" for direction, value in sorted(tokens.items()))
            + "</p>"
        ]
        body.append(_spending(totals.get("bot_tokens_spent", {})))
        sums, counts = (
            totals.get("bot_pipeline_stage_seconds_sum", {}),
            totals.get("bot_pipeline_stage_seconds_count", {}),
        )
        stage_rows = [
            [esc(labels[0]), f"{counts.get(labels, 0):.0f}", f"{1000 * value / counts[labels]:.0f} ms"]
            for labels, value in sums.items()
            if counts.get(labels)
        ]
        body.append(
            "<h2>Pipeline stages</h2>"
            + (table(["stage", "runs", "mean"], stage_rows) if stage_rows else "<p>No run yet.</p>")
        )
        turns = await self.traces.recent(RECENT_TURNS)
        slowest = max((turn.reply_seconds for turn in turns), default=0.0) or 1.0
        rows = []
        for turn in turns:
            prompt = sum(use.prompt for use in turn.tokens)
            cached = sum(use.cached for use in turn.tokens)
            share = cached / prompt if prompt else 0.0
            rows.append(
                [f"{turn.at:%Y-%m-%d %H:%M:%S}", esc(turn.session_id),
                 f"{turn.reply_seconds:.1f} s {bar(turn.reply_seconds / slowest, 'reply time', 120)}",
                 f"{prompt:,}", f"{round(100 * share)}% {bar(share, 'cached share', 120)}"]
            )  # fmt: skip
        body.append(
            f"<h2>Recent turns{'' if self.replica is None else ' (every replica’s)'}</h2>"
            + (
                table(["when", "chat", "reply time", "prompt tokens", "cached"], rows)
                if rows
                else "<p>No turn yet.</p>"
            )
        )
        secrets = self.mcp.secrets()

        def redacted(text: str | None) -> str:
            text = text or ""
            for secret in secrets:
                if secret:
                    text = text.replace(secret, "***")
            return text

        servers = [
            [
                esc(status.name),
                esc(status.transport),
                esc(status.state),
                str(status.offered),
                str(status.restarts),
                esc(redacted(status.last_error)),
            ]
            for status in self.mcp.statuses()
        ]
        body.append(
            "<h2>MCP servers</h2>"
            + (
                table(["server", "transport", "state", "tools", "restarts", "last error"], servers)
                if servers
                else "<p>None configured.</p>"
            )
        )
        queues = [[esc(chat), str(depth)] for chat, depth in sorted(self.queue_depths().items())]
        body.append(
            f"<h2>Queues{'' if self.replica is None else ' (this replica’s)'}</h2>"
            + (table(["chat", "waiting"], queues) if queues else "<p>No message waiting.</p>")
        )
        return visit.page("Health", "\n".join(body))


def _spending(spent: dict[tuple[str, ...], float]) -> str:
    """Tokens spent by purpose, today and in total (kept across restarts), with the cached share of the prompts."""
    by_row: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (purpose, direction, period), value in spent.items():
        by_row[(period, purpose)][direction] = value
    rows = []
    for (period, purpose), figures in sorted(by_row.items(), key=lambda row: (row[0][0] != "today", row[0][1])):
        prompt, cached = figures.get("prompt", 0.0), figures.get("cached", 0.0)
        share = cached / prompt if prompt else 0.0
        rows.append(
            [esc(period), esc(purpose), f"{prompt:,.0f}", f"{figures.get('completion', 0.0):,.0f}",
             f"{round(100 * share)}% {bar(share, 'cached share', 120)}"]
        )  # fmt: skip
    if not rows:
        return "<h2>Tokens spent</h2><p>No model call yet.</p>"
    return "<h2>Tokens spent</h2>" + table(["period", "purpose", "prompt", "completion", "cached"], rows, css="spent")

""" "Why this reply": for a recent turn of a chat, the prompt plan (each part against its share, drawn),
the memory items packed with their scores and those that just missed, the graph snippets, the tools
called with their results, and the tokens (cached among them). The owner sees every chat; anyone else
only their own private chat. The turns are those every replica answered (where they share a database), kept
across restarts; an item forgotten since shows as forgotten."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from bot.console.html import PREFIX, bar, esc, stacked_bar, table
from bot.console.server import Visit
from bot.pipeline.trace_records import FORGOTTEN_TEXT, PackEntry, TurnTrace
from bot.pipeline.traces import TurnTraces


@dataclass(frozen=True)
class WhyPage:
    traces: TurnTraces

    async def show(self, visit: Visit) -> web.StreamResponse:
        viewer = visit.viewer
        chats = [chat for chat in await self.traces.chats() if viewer.owner or chat == viewer.person]
        chat = visit.request.query.get("chat") or (chats[0] if chats else "")
        turns = await self.traces.of(chat) if chat in chats else []
        if not turns:
            return visit.page("Why this reply", "<p>No answered turn of yours is kept.</p>")
        wanted = visit.request.query.get("turn")
        trace = next((turn for turn in turns if turn.turn_id == wanted), turns[-1])
        chat_links = " ".join(
            f'<a href="{PREFIX}/why?chat={esc(quote(name))}" class="{"chosen" if name == chat else ""}">{esc(name)}</a>'
            for name in chats
        )
        turn_links = "".join(
            f'<li><a href="{PREFIX}/why?chat={esc(quote(chat))}&amp;turn={esc(turn.turn_id)}" '
            f'class="{"chosen" if turn is trace else ""}">{turn.at:%H:%M:%S} {esc(_short(turn.question, 60))}</a></li>'
            for turn in reversed(turns)
        )
        body = (
            f'<p class="chats">{chat_links}</p><details open><summary>Recent turns</summary>'
            f'<ul class="turns">{turn_links}</ul></details>' + _trace(trace)
        )
        return visit.page("Why this reply", body)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _content(entry: PackEntry) -> str:
    return f'<em class="forgotten">{esc(FORGOTTEN_TEXT)}</em>' if entry.forgotten else esc(entry.content)


def _trace(trace: TurnTrace) -> str:
    parts = [
        f'<section class="turn" data-turn="{esc(trace.turn_id)}"><h2>{esc(_short(trace.question, 120))}</h2>',
        f'<p class="reply">{esc(_short(trace.reply, 600))}</p>',
        f"<p>Model {esc(trace.model)}, reply after {trace.reply_seconds:.1f} s.</p>",
    ]
    total = sum(part.tokens for part in trace.plan)
    plan_rows = [
        [esc(part.label), f"{part.tokens:,}", f"{part.given:,} ({esc(part.share)})" if part.given else "–",
         bar(part.tokens / part.given if part.given else 0.0, f"{part.label}: {part.tokens} of {part.given}")
         + (' <span class="cut">cut</span>' if part.cut else "")]
        for part in trace.plan
    ]  # fmt: skip
    parts.append(f"<h3>Prompt plan: {total:,} of {trace.threshold_tokens:,} tokens</h3>")
    parts.append(stacked_bar([(part.label, part.tokens) for part in trace.plan], trace.threshold_tokens))
    parts.append(
        table(["part", "tokens", "its share (parts may share one)", "use of its share"], plan_rows, css="plan")
    )
    parts.append(f"<h3>Memory pack</h3><p>{esc(trace.pack_summary or 'No structured memory in this prompt.')}</p>")
    if trace.packed:
        rows = [
            [f'<span class="packed" data-item="{esc(entry.item_id)}">{_content(entry)}</span>', esc(entry.section),
             f"{entry.score:.3f}", esc(", ".join(f"{name} {value:.2f}" for name, value in entry.parts.items()))]
            for entry in trace.packed
        ]  # fmt: skip
        parts.append(table(["item", "section", "score", "parts"], rows, css="packed"))
    if trace.missed:
        rows = [
            [f"<code>{esc(item_id)}</code>", esc(section), f"{score:.3f}"] for item_id, score, section in trace.missed
        ]
        parts.append("<h4>Just missed (over the budget)</h4>" + table(["item", "section", "score"], rows))
    parts.append("<h3>Knowledge graph</h3>")
    parts.append(
        f'<pre class="graph-snippets">{esc(trace.graph)}</pre>' if trace.graph else "<p>No graph snippets.</p>"
    )
    parts.append("<h3>Tools</h3>")
    if trace.tools:
        rows = [
            [esc(tool.name), f"<code>{esc(tool.arguments)}</code>", f"<pre>{esc(tool.result)}</pre>"]
            for tool in trace.tools
        ]
        parts.append(table(["tool", "arguments", "result"], rows))
    else:
        parts.append("<p>No tool was called.</p>")
    rows = [
        [esc(use.model), f"{use.prompt:,}", f"{use.cached:,}",
         f"{round(100 * use.cached / use.prompt) if use.prompt else 0}%",
         f"{use.completion:,}"]
        for use in trace.tokens
    ]  # fmt: skip
    parts.append("<h3>Tokens</h3>" + table(["model call", "prompt", "cached", "cached share", "completion"], rows))
    parts.append("</section>")
    return "\n".join(parts)

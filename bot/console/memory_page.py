"""The memory pages: the items by layer and type with their history, search with each result's score in
its parts, edit, pin and forget; MEMORY.md in an editor that shows how much of it fits its share of the
prompt; the daily notes. A viewer sees and changes only their own memory (`Viewer.person`)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from bot.console.html import bar, esc, form, hidden, table
from bot.console.server import Visit, back_to, notes_of
from bot.context.budget import MEMORY
from bot.context.planner import ContextPlanner
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.prompt_building import long_term_cap_tokens
from bot.memory.retrieval import W_CONFIDENCE, W_RECENCY, W_RELEVANCE, W_SALIENCE, ScoreParts, Section
from bot.memory.service import MemoryListing, MemoryService
from bot.memory.write_service import UnknownMemoryItem
from bot.runtime_config import RuntimeConfigStore

SEARCH_RESULTS = 20
# Items listed per layer, newest first (the rest are reached by search).
LISTED_PER_LAYER = 100
# Sections retrieval places items in whatever the message says (their relevance is set, not matched).
PLACED = {Section.PINNED: "pinned: in every prompt", Section.WORKING: "a recent exchange (the working set)"}
_DAY_FILE = re.compile(r"^\d{4}-\d\d-\d\d\.md$")


@dataclass(frozen=True)
class MemoryPages:
    memory: MemoryService
    config_store: RuntimeConfigStore
    planner: ContextPlanner

    async def items(self, visit: Visit) -> web.StreamResponse:
        config = (await self.config_store.current()).memory
        person = visit.viewer.person
        query = visit.request.query.get("q", "").strip()
        body = [notes_of(visit.request), self._search_form(query)]
        if query:
            found = await self.memory.explain(config, person, query, SEARCH_RESULTS)
            body.append(f"<h2>Search: “{esc(query)}”</h2>")
            body.append(_results(found) if found else "<p>Nothing in memory matches.</p>")
        listing = await self.memory.newest_items(config, person, LISTED_PER_LAYER)
        body.append(self._layers(listing, visit.csrf))
        return visit.page("Memory", "\n".join(body))

    @staticmethod
    def _search_form(query: str) -> str:
        field = (
            f'<input type="search" name="q" value="{esc(query)}" placeholder="What do you remember about…" '
            'aria-label="search">'
        )
        return form("memory", field, "", "Search", css="search", method="get")

    @staticmethod
    def _layers(listing: MemoryListing, csrf: str) -> str:
        sections = []
        for layer in MemoryLayer:
            count = listing.counts.get(layer.value, 0)
            by_type: dict[str, list[tuple[MemoryItem, list[MemoryItem]]]] = defaultdict(list)
            for item, versions in listing.items:
                if item.layer is layer:
                    by_type[item.type].append((item, versions))
            more = f" (the newest {LISTED_PER_LAYER} shown)" if count > LISTED_PER_LAYER else ""
            parts = [f"<h2>{esc(layer.value.lower())} · {count}{more}</h2>"]
            for kind, listed in sorted(by_type.items()):
                parts.append(f"<h3>{esc(kind)}</h3>")
                parts.append("".join(_item_card(item, versions, csrf) for item, versions in listed))
            sections.append(f'<section class="layer">{"".join(parts)}</section>')
        return "\n".join(sections)

    async def change(self, visit: Visit) -> web.StreamResponse:
        """Edit, pin, unpin or forget one item of the viewer's own memory."""
        config = (await self.config_store.current()).memory
        person, action = visit.viewer.person, visit.form.get("action", "")
        item_id = visit.form.get("id", "").strip()
        now = self.memory.now()
        try:
            if action == "forget":
                forgotten = await self.memory.forget(config, person, item_id)
                back_to("memory", note=f"Forgotten: {forgotten.content}")
            if action == "edit":
                content = visit.form.get("content", "").strip()
                if not content:
                    back_to("memory", error="An item cannot be empty: forget it instead.")
                edited = await self.memory.change(config, person, lambda writer: writer.update(item_id, content, now))
                back_to("memory", note=f"Saved: {edited.content}")
            if action in ("pin", "unpin"):
                pinned = action == "pin"
                changed = await self.memory.change(config, person, lambda writer: writer.pin(item_id, now, pinned))
                back_to("memory", note=f"{'Pinned' if pinned else 'Unpinned'}: {changed.content}")
        except UnknownMemoryItem:
            back_to("memory", error=f"No memory item {item_id} in your memory.")
        back_to("memory", error=f"Unknown action “{action}”.")

    async def long_term(self, visit: Visit) -> web.StreamResponse:
        runtime = await self.config_store.current()
        config = runtime.memory
        long_term = await self.memory.long_term(config, visit.viewer.person)
        text = await long_term.read()
        estimator = self.planner.estimator
        model = runtime.llm.model
        tokens = estimator.text(text, model) if text else 0
        share = self.planner.budget(model, runtime).cap(MEMORY)
        cap = long_term_cap_tokens(config, min(config.max_prompt_budget_tokens, share))
        chars_per_token = len(text) / tokens if tokens else estimator.ratio_for(model)
        fits = (
            "all of it goes with every message"
            if tokens <= cap
            else ("over its share: its beginning goes with every message, the parts a message is about come with it")
        )
        editor = (
            f'<textarea id="long-term" name="text" rows="18" data-cap="{cap}" '
            f'data-chars-per-token="{chars_per_token:.3f}">'
            f"{esc(text)}</textarea>"
            f'<p id="long-term-fit" class="fit">~{tokens:,} tokens of its {cap:,}-token share '
            f"({round(100 * tokens / max(cap, 1))}%): {esc(fits)}</p>"
            + bar(tokens / max(cap, 1), "MEMORY.md against its share")
        )
        last_use = (await self.memory.scope(config, visit.viewer.person)).long_term_use
        if last_use is not None:
            editor += f'<p class="last-use">In the last prompt: {esc(last_use.describe())}.</p>'
        body = notes_of(visit.request) + form("long-term", editor, visit.csrf, "Save MEMORY.md", css="editor")
        return visit.page("MEMORY.md", body, scripts=("long_term.js",))

    async def save_long_term(self, visit: Visit) -> web.StreamResponse:
        config = (await self.config_store.current()).memory
        text = visit.form.get("text", "").replace("\r\n", "\n")
        long_term = await self.memory.long_term(config, visit.viewer.person)
        await long_term.write(text)
        back_to("long-term", note=f"Saved MEMORY.md ({len(text):,} characters): the next message reads it.")

    async def notes(self, visit: Visit) -> web.StreamResponse:
        config = (await self.config_store.current()).memory
        root = self.memory.paths_for(config, visit.viewer.person).root
        days = sorted((path.stem for path in root.glob("*.md") if _DAY_FILE.match(path.name)), reverse=True)
        chosen = visit.request.query.get("day") or (days[0] if days else "")
        links = " ".join(
            f'<a href="?day={esc(day)}" class="{"chosen" if day == chosen else ""}">{esc(day)}</a>' for day in days
        )
        text = (root / f"{chosen}.md").read_text("utf-8", errors="replace") if chosen in days else ""
        body = f'<p class="days">{links or "No daily notes yet."}</p>'
        if text:
            body += f'<h2>{esc(chosen)}</h2><pre class="note-text">{esc(text)}</pre>'
        return visit.page("Daily notes", body)


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M}"


def _item_card(item: MemoryItem, versions: list[MemoryItem], csrf: str) -> str:
    said_by = item.speaker or item.source or "?"
    pin_action = "unpin" if item.pinned else "pin"
    facts = (
        f"<span>confidence {item.confidence:.2f}</span> <span>salience {item.salience:.2f}</span> "
        f"<span>created {_when(item.created_at)}</span> <span>updated {_when(item.updated_at)}</span> "
        f"<span>from {esc(said_by)}</span>" + (' <span class="pin">pinned</span>' if item.pinned else "")
    )
    edit = form(
        "memory",
        hidden("action", "edit") + hidden("id", item.id)
        + f'<textarea name="content" rows="2" aria-label="content of {esc(item.id)}">{esc(item.content)}</textarea>',
        csrf, "Save", css="edit",
    )  # fmt: skip
    pin = form(
        "memory", hidden("action", pin_action) + hidden("id", item.id), csrf, pin_action.capitalize(), css="inline"
    )
    forget = form("memory", hidden("action", "forget") + hidden("id", item.id), csrf, "Forget", css="inline danger")
    older = ""
    if versions:
        lines = "".join(
            f"<li><s>{esc(version.content)}</s> <small>{_when(version.updated_at)}</small></li>" for version in versions
        )
        plural = "s" if len(versions) > 1 else ""
        older = f"<details><summary>{len(versions)} earlier version{plural}</summary><ul>{lines}</ul></details>"
    return (
        f'<article class="item" id="item-{esc(item.id)}" data-item="{esc(item.id)}">'
        f'<p class="content">{esc(item.content)}</p><p class="facts"><code>{esc(item.id)}</code> {facts}</p>'
        f'{older}<div class="actions">{edit}{pin}{forget}</div></article>'
    )


def _results(found: list[tuple[MemoryItem, ScoreParts]]) -> str:
    rows = []
    for item, parts in found:
        ranked = parts.ranked
        placed = PLACED.get(ranked.section)
        matched = (
            f"{placed}; "
            if placed
            else f'<span class="part">lexical {parts.lexical:.2f}</span> + '
            f'<span class="part">dense {parts.dense:.2f}</span> + <span class="part">lifts {parts.lifts:.2f}</span> = '
            f'<span class="part">relevance {ranked.relevance:.2f}</span>; '
        )
        breakdown = matched + (
            f"{W_RELEVANCE}×{ranked.relevance:.2f} + {W_RECENCY}×recency {ranked.recency:.2f} + "
            f"{W_SALIENCE}×salience {ranked.salience:.2f} + {W_CONFIDENCE}×confidence {ranked.confidence:.2f}"
        )
        rows.append(
            [
                f'<span class="result" data-item="{esc(item.id)}">{esc(item.content)}</span>',
                esc(ranked.section),
                f'<strong class="score">{ranked.score:.3f}</strong>',
                f'<span class="breakdown">{breakdown}</span>',
            ]
        )
    return table(["item", "section", "score", "how it was scored"], rows, css="results")

"""`MemoryPromptPackService`: renders the retrieved items as prompt sections within the token budgets.

The pack is filled by score, not by a fixed count: pinned items first, then the working set (the
last `workingTopK` exchanges outside the live session), then the best `…TopK` of each layer, then
everything else best first, while the pack stays within `softPromptBudgetTokens`. Past it, an item must
be the more relevant the further past the soft budget it takes the pack (`worth_room`: `HIGH_RELEVANCE`
of the best match at the soft budget, rising to the best's own at `maxPromptBudgetTokens`; headers
count): the few clearly strong matches of a question go past the soft budget, and a question whose many
matches are all about as strong stays near it, so the pack's size holds on any conversation. The pack is
full once `FULL_AFTER_MISSES` items in a row that may go past the soft budget no longer fit: recall does
not depend on that number, and stopping early spares reading the rest of a large memory. The same text
twice (up to case, punctuation and spacing) is shown once. A single item longer than
`ITEM_CHAR_LIMIT` is cut with a visible marker. A relative date in an item ("yesterday", "last
Friday") is followed by the dates it meant on the day the item was made. Exchanges are shown under a
heading per day with their time, so "when did …" can be answered; how many items did not fit is kept
in the diagnostics.

The candidates come ranked but not parsed (`RankedItem`): the pack parses an item only when it reads
it, `PARSE_AHEAD` at a time, so the hundreds it never reaches cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, tzinfo
from typing import NamedTuple

import numpy as np

from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryItem, MemoryLayer, MemoryPack, MemoryQuery, PackDiagnostics, ScoredItem
from bot.domain.text import normalized_words
from bot.memory.budget import cut_marker
from bot.memory.item_storage import LAYERS
from bot.memory.retrieval import RankedItem, Ranking, Section
from bot.memory.temporal import with_said_dates

# The items a pack reads, by id (`MemoryItemStore.get_many`: those no longer stored are left out).
ItemReader = Callable[[Iterable[str]], Mapping[str, MemoryItem]]

HIGH_RELEVANCE = 0.45
ITEM_CHAR_LIMIT = 700
TOP_SCORES_SHOWN = 5
# The candidates left out for the budget that the diagnostics name (the console shows them as near misses).
MISSED_SHOWN = 5
# Items parsed at once when the pack reaches one not yet parsed: it and the next ones (one query).
PARSE_AHEAD = 32
# Once the soft budget is full, this many high items in a row that do not fit under the max end the
# pack: what is left is the ever smaller room of a full pack, and reading on (at 100,000 items, ~190 more
# parsed per message for one short line now and then) costs more than that line is worth.
FULL_AFTER_MISSES = 8
DATED_SECTIONS = (Section.EPISODIC, Section.WORKING)
# Items whose shown text (`Shown`) is kept; the pack reads about 130 items a message at 100,000 items, and a
# conversation's topic brings many of them back message after message. Emptied when full.
SHOWN_CACHE_SIZE = 4096

SECTION_HEADERS = {
    Section.PINNED: "## Pinned Memory",
    Section.SEMANTIC: "## Facts and Preferences",
    Section.PROCEDURAL: "## Procedures and Fixes",
    Section.EPISODIC: "## Related Earlier Exchanges",
    Section.WORKING: "## Recent Exchanges",
}


def offered_order(items: Sequence[RankedItem], query: MemoryQuery) -> Ranking:
    """Pinned, the working set, each layer's top k, then the rest: each group best first (equal scores in the
    order of their ids)."""
    ranking = Ranking.of(items)
    scores = ranking.column("score")
    order = np.argsort(-scores, kind="stable")
    # Equal scores by id: each run of them sorted by id (rare enough that only those ids are compared).
    ordered = scores[order]
    tied = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(tied):
        ids = ranking.ids
        members = np.union1d(tied, tied + 1)
        runs = np.cumsum(np.concatenate(([True], ordered[1:] != ordered[:-1])))[members]
        by_id = np.argsort(np.array([ids[at] for at in order[members].tolist()]), kind="stable")
        rank = np.empty(len(members), dtype=np.int64)
        rank[by_id] = np.arange(len(members))
        order[members] = order[members][np.lexsort((rank, runs))]
    sections = ranking.sections()[order]
    pinned = order[sections == _PINNED]
    working = order[sections == _WORKING]
    others = order[(sections != _PINNED) & (sections != _WORKING)]
    layers = ranking.layers()[others]
    guaranteed = np.zeros(len(others), dtype=bool)
    for layer, top_k in (
        (MemoryLayer.EPISODIC, query.episodic_top_k),
        (MemoryLayer.SEMANTIC, query.semantic_top_k),
        (MemoryLayer.PROCEDURAL, query.procedural_top_k),
    ):
        guaranteed[np.flatnonzero(layers == LAYERS.index(layer))[: max(top_k, 0)]] = True
    return ranking.reordered(np.concatenate((pinned, working, others[guaranteed], others[~guaranteed])))


_PINNED = Section.ORDER.index(Section.PINNED)
_WORKING = Section.ORDER.index(Section.WORKING)


class Shown(NamedTuple):
    """What the pack shows of an item, made from its text and its time alone."""

    same_text: str  # its words up to case, punctuation and spacing: the same text twice is shown once
    line: str  # `MemoryPromptPackService.line`
    heading: str  # its day heading and clock time (`MemoryPromptPackService.when`)
    clock: str


class MemoryPromptPackService:
    """Turns scored items into the `MemoryPack` the prompt gets."""

    def __init__(self, estimator: TokenEstimator, zone: tzinfo) -> None:
        self._estimator = estimator
        self._zone = zone
        # By (text, time made): an edited item is a new key, and one key holds what any item with them shows.
        self._shown: dict[tuple[str, datetime], Shown] = {}
        # The day headings made, by day (a pack's items fall on a few of them).
        self._headings: dict[date, str] = {}

    def shown(self, item: MemoryItem) -> Shown:
        """The item's `Shown`, kept for the next packs that read an item with its text and time."""
        key = (item.content, item.created_at)
        kept = self._shown.get(key)
        if kept is None:
            if len(self._shown) >= SHOWN_CACHE_SIZE:
                self._shown.clear()  # one call, safe while a pack of a small scope is built on the event loop
            local = item.created_at.astimezone(self._zone)
            kept = self._shown[key] = Shown(normalized_words(item.content), self.line(item, local), *self.when(local))
        return kept

    @staticmethod
    def line(item: MemoryItem, local: datetime) -> str:
        """The item's line: its words, each relative date followed by the dates it meant when the item was
        made (at `local`, its time in the bot's zone: "last Friday (5 May 2023)"), so the model never reads it
        against today."""
        content = with_said_dates(item.content.strip(), local)
        if len(content) > ITEM_CHAR_LIMIT:
            content = content[:ITEM_CHAR_LIMIT].rstrip() + " " + cut_marker(len(content) - ITEM_CHAR_LIMIT)
        return "- " + content.replace("\n", "\n  ")

    @staticmethod
    def worth_room(scored: RankedItem, filled: int, soft_tokens: int, max_tokens: int) -> bool:
        """Whether an item that fills the pack to `filled` tokens, past the soft budget, is worth its room: pinned,
        or relevant enough for how far past the soft budget it goes: `HIGH_RELEVANCE` of the best match at the
        soft budget, rising in a straight line to the best match's own at the max. Each further character past
        the soft budget costs more relevance, so a question whose many matches are all about as strong (a
        named person's every line, lifted alike) stays near the soft budget, and only the few clearly strong
        matches of a question go far past it."""
        if filled > max_tokens:
            return False
        if scored.section == Section.PINNED:
            return True
        over = (filled - soft_tokens) / max(max_tokens - soft_tokens, 1)
        return scored.relevance >= HIGH_RELEVANCE + (1 - HIGH_RELEVANCE) * min(max(over, 0.0), 1.0)

    def when(self, local: datetime) -> tuple[str, str]:
        """The day heading and clock time of an item made at `local` (its time in the bot's zone)."""
        day = local.date()
        heading = self._headings.get(day)
        if heading is None:
            if len(self._headings) >= SHOWN_CACHE_SIZE:
                self._headings.clear()
            heading = self._headings[day] = f"### {local:%Y-%m-%d (%A)}"
        return heading, f"{local.hour:02d}:{local.minute:02d} "

    def build(
        self,
        offered: Sequence[RankedItem],
        items: ItemReader,
        candidates: int,
        soft_tokens: int,
        max_tokens: int,
        model: str | None = None,
    ) -> MemoryPack:
        """The pack of `offered` (in `offered_order`) within the budgets, counted in `model`'s tokens; `items`
        reads the items it gets to (one left out by it, no longer stored, is passed over)."""
        soft_tokens = min(soft_tokens, max_tokens)
        offered = Ranking.of(offered)
        chosen: dict[str, list[tuple[ScoredItem, str]]] = {section: [] for section in Section.ORDER}
        read: dict[str, MemoryItem] = {}
        # Day headings, and the clock times, already paid for: each is shown once.
        headings: set[tuple[str, ...]] = set()
        seen: set[str] = set()
        used = 0
        dropped = 0
        missed: list[RankedItem] = []
        ids = offered.ids
        # Which items may go past the soft budget (pinned, or a high score), and the last of them: past it, none can.
        worth = ((offered.column("relevance") >= HIGH_RELEVANCE) | (offered.sections() == _PINNED)).tolist()
        last_worth = len(worth) - 1
        while last_worth >= 0 and not worth[last_worth]:
            last_worth -= 1
        soft_full = False  # the first item that does not fit in the soft budget fills it
        misses = 0  # high items in a row that did not fit under the max, once the soft budget is full
        for position, item_id in enumerate(ids):
            if soft_full and not worth[position]:
                dropped += 1
                if len(missed) < MISSED_SHOWN:
                    missed.append(offered[position])
                if position > last_worth:
                    dropped += len(ids) - position - 1
                    break
                continue
            if item_id not in read:
                # This item and the next ones the loop will read (once the soft budget is full, the high ones).
                ahead = [
                    ids[at]
                    for at in range(position, min(position + PARSE_AHEAD, len(ids)))
                    if ids[at] not in read and (not soft_full or worth[at])
                ]
                read.update(items(ahead))
            item = read.get(item_id)
            if item is None:
                continue
            scored = offered[position]
            shown = self.shown(item)
            same_text = shown.same_text
            if same_text in seen:
                continue
            text = shown.line
            cost = self._estimator.text(text + "\n", model)
            if not chosen[scored.section]:
                cost += self._estimator.text(SECTION_HEADERS[scored.section] + "\n\n", model)
            heading, clock = (shown.heading, shown.clock) if scored.section in DATED_SECTIONS else ("", "")
            if heading and (scored.section, heading) not in headings:
                cost += self._estimator.text(heading + "\n", model)
            stamp = (scored.section, heading, clock) if heading else None
            if stamp is not None and stamp not in headings:
                cost += self._estimator.text(stamp[2], model)
            within_soft = used + cost <= soft_tokens
            if within_soft or self.worth_room(scored, used + cost, soft_tokens, max_tokens):
                chosen[scored.section].append((ScoredItem(item, scored.score, scored.section, scored.parts), text))
                seen.add(same_text)
                if heading:
                    headings.add((scored.section, heading))
                if stamp is not None:
                    headings.add(stamp)
                used += cost
                misses = 0
            else:
                dropped += 1
                if len(missed) < MISSED_SHOWN:
                    missed.append(scored)
                misses += soft_full
                soft_full = True
                if misses >= FULL_AFTER_MISSES:
                    dropped += len(ids) - position - 1
                    break
        blocks = []
        selected: list[ScoredItem] = []
        for section in Section.ORDER:
            entries = chosen[section]
            if not entries:
                continue
            if section in DATED_SECTIONS:
                blocks.append(self._timeline(section, entries))
            else:
                blocks.append(SECTION_HEADERS[section] + "\n" + "\n".join(text for _, text in entries))
            selected += [scored for scored, _ in entries]
        rendered = "\n\n".join(blocks)
        top = sorted((entry.score for entry in selected), reverse=True)[:TOP_SCORES_SHOWN]
        diagnostics = PackDiagnostics(
            candidates=candidates,
            selected=len(selected),
            tokens=self._estimator.text(rendered, model) if rendered else 0,
            dropped_for_budget=dropped,
            top_scores=tuple(top),
            missed=tuple((entry.item_id, entry.score, entry.section) for entry in missed),
        )
        return MemoryPack(tuple(selected), rendered, diagnostics)

    def _timeline(self, section: str, entries: list[tuple[ScoredItem, str]]) -> str:
        """Exchanges read as a timeline: a heading per day, then each item with its time; items of the
        same minute (an imported conversation, a burst of messages) show it once, on the first."""
        entries.sort(key=lambda pair: pair[0].item.created_at)
        lines = [SECTION_HEADERS[section]]
        current_day = current_time = ""
        for scored, text in entries:
            _, _, heading, time = self.shown(scored.item)
            if heading != current_day:
                lines.append(heading)
                current_day, current_time = heading, ""
            lines.append(text if time == current_time else f"- {time}{text.removeprefix('- ')}")
            current_time = time
        return "\n".join(lines)

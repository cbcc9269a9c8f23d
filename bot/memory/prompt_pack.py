"""`MemoryPromptPackService`: renders the retrieved items as prompt sections within the token budgets.

Pinned items come first; the rest go in by score. Items are taken while the pack stays within
`softPromptBudgetTokens`; past it, only items scoring at least `HIGH_SCORE` are added, and never past
`maxPromptBudgetTokens` (section headers count). A single item longer than `ITEM_CHAR_LIMIT` is cut
with a visible marker. What did not fit is counted in the diagnostics.
"""

from __future__ import annotations

from datetime import tzinfo

from bot.compaction.estimator import TokenEstimator
from bot.domain.memory import MemoryPack, PackDiagnostics, ScoredItem
from bot.memory.budget import cut_marker
from bot.memory.retrieval import Section

HIGH_SCORE = 0.6
ITEM_CHAR_LIMIT = 700
TOP_SCORES_SHOWN = 5

SECTION_HEADERS = {
    Section.PINNED: "## Pinned Memory",
    Section.SEMANTIC: "## Facts and Preferences",
    Section.PROCEDURAL: "## Procedures and Fixes",
    Section.EPISODIC: "## Related Earlier Exchanges",
    Section.WORKING: "## Recent Exchanges",
}


class MemoryPromptPackService:
    """Turns scored items into the `MemoryPack` the prompt gets."""

    def __init__(self, estimator: TokenEstimator, zone: tzinfo) -> None:
        self._estimator = estimator
        self._zone = zone

    def line(self, scored: ScoredItem) -> str:
        item = scored.item
        content = item.content.strip()
        if len(content) > ITEM_CHAR_LIMIT:
            content = content[:ITEM_CHAR_LIMIT].rstrip() + " " + cut_marker(len(item.content) - ITEM_CHAR_LIMIT)
        content = content.replace("\n", "\n  ")
        if scored.section in (Section.EPISODIC, Section.WORKING):
            return f"- [{item.created_at.astimezone(self._zone):%Y-%m-%d %H:%M}] {content}"
        return f"- {content}"

    def build(self, scored_items: list[ScoredItem], candidates: int, soft_tokens: int, max_tokens: int) -> MemoryPack:
        soft_tokens = min(soft_tokens, max_tokens)
        ordered = sorted(scored_items, key=lambda entry: (entry.section != Section.PINNED, -entry.score, entry.item.id))
        chosen: dict[str, list[tuple[ScoredItem, str]]] = {section: [] for section in Section.ORDER}
        used = 0
        dropped = 0
        for scored in ordered:
            text = self.line(scored)
            cost = self._estimator.text(text + "\n")
            if not chosen[scored.section]:
                cost += self._estimator.text(SECTION_HEADERS[scored.section] + "\n\n")
            within_soft = used + cost <= soft_tokens
            worth_more = (scored.section == Section.PINNED or scored.score >= HIGH_SCORE) and used + cost <= max_tokens
            if within_soft or worth_more:
                chosen[scored.section].append((scored, text))
                used += cost
            else:
                dropped += 1
        blocks = []
        selected: list[ScoredItem] = []
        for section in Section.ORDER:
            entries = chosen[section]
            if not entries:
                continue
            if section in (Section.EPISODIC, Section.WORKING):
                entries.sort(key=lambda pair: pair[0].item.created_at)  # read as a timeline
            blocks.append(SECTION_HEADERS[section] + "\n" + "\n".join(text for _, text in entries))
            selected += [scored for scored, _ in entries]
        rendered = "\n\n".join(blocks)
        top = sorted((entry.score for entry in selected), reverse=True)[:TOP_SCORES_SHOWN]
        diagnostics = PackDiagnostics(
            candidates=candidates,
            selected=len(selected),
            tokens=self._estimator.text(rendered) if rendered else 0,
            dropped_for_budget=dropped,
            top_scores=tuple(top),
        )
        return MemoryPack(tuple(selected), rendered, diagnostics)

"""MEMORY.md beyond its share of the prompt: its pieces, indexed like memory items and brought in by relevance.

MEMORY.md leads the prompt whole while it fits its share (`memory.longTermMaxShare`). Once it outgrows
it, nothing of it is silently dropped: the file is split into pieces (`split_long_term`: its sections
and paragraphs, each with the path of headings it sits under), the pieces are indexed with the BM25
index memory items use, and each message gets the beginning of the file that fits (the same for every
message, so it stays a cacheable prefix) and, from the rest, the pieces most relevant to the message.
How much of the file reached the last prompt is kept (`LongTermUse`) for `/status` and `/context`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.lexical_index import Bm25Index

# A paragraph longer than this is split at line ends, so a long list is many pieces, not one.
MAX_PIECE_CHARS = 600
# Candidates asked of the index for a message; the best of them that fit are shown.
RELEVANT_CANDIDATES = 40
PIECE_ID_PREFIX = "memory-md:"
RELEVANT_HEADER = "## Long-term Memory: further down, relevant to this message"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class LongTermPiece:
    """A section's paragraph (or a part of a long one) of MEMORY.md: the headings it sits under, its text,
    and where it is in the file (`start`, `end`: character offsets)."""

    headings: tuple[str, ...]
    text: str
    start: int
    end: int

    def rendered(self) -> str:
        return f"{' › '.join(self.headings)}: {self.text}" if self.headings else self.text


def split_long_term(text: str) -> list[LongTermPiece]:
    """MEMORY.md's pieces in file order: each paragraph under its headings (a heading line is not a piece
    of its own), a paragraph over `MAX_PIECE_CHARS` split at line ends."""
    pieces: list[LongTermPiece] = []
    headings: list[tuple[int, str]] = []
    block: list[tuple[int, str]] = []  # (offset, line) of the paragraph being read

    def flush() -> None:
        path = tuple(title for _, title in headings)
        group: list[tuple[int, str]] = []
        for offset, line in [*block, (-1, "")]:
            size = sum(len(text) + 1 for _, text in group)
            if group and (offset < 0 or size + len(line) > MAX_PIECE_CHARS):
                start, end = group[0][0], group[-1][0] + len(group[-1][1])
                pieces.append(LongTermPiece(path, "\n".join(text for _, text in group).strip(), start, end))
                group = []
            if offset >= 0:
                group.append((offset, line))
        block.clear()

    offset = 0
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        if heading is not None:
            flush()
            level = len(heading.group(1))
            headings[:] = [(depth, title) for depth, title in headings if depth < level]
            headings.append((level, heading.group(2)))
        elif line.strip():
            block.append((offset, line))
        else:
            flush()
        offset += len(line) + 1
    flush()
    return [piece for piece in pieces if piece.text]


@dataclass(frozen=True)
class LongTermUse:
    """How much of MEMORY.md one prompt held: its beginning, and the relevant pieces from further down."""

    total_chars: int
    head_chars: int
    relevant_chars: int = 0
    relevant_pieces: int = 0

    @property
    def whole(self) -> bool:
        return self.head_chars >= self.total_chars

    @property
    def left_out(self) -> bool:
        """Nothing of it in the prompt: the memory budget leaves it no room at all."""
        return not self.whole and self.head_chars == 0 and self.relevant_chars == 0

    def describe(self) -> str:
        """`/status` and `/context`'s words for it."""
        if self.whole:
            return f"MEMORY.md: all {self.total_chars:,} chars in the prompt"
        if self.left_out:
            return f"MEMORY.md: {self.total_chars:,} chars, left out: the memory budget leaves it no room"
        return (
            f"MEMORY.md: {self.total_chars:,} chars, over its share: the first {self.head_chars:,} in every "
            f"prompt, and {self.relevant_pieces} relevant {'part' if self.relevant_pieces == 1 else 'parts'} "
            f"({self.relevant_chars:,} chars) from the rest in the last one; the rest is brought in when a message "
            "is about it"
        )


@dataclass(frozen=True)
class LongTermPrompt:
    """MEMORY.md for one message: `head` leads the prompt, `relevant` goes with the message's own memory."""

    head: str
    relevant: str
    use: LongTermUse


class LongTermIndex:
    """One MEMORY.md text's pieces and their BM25 index; made again when the text changes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pieces = split_long_term(text)
        # Where each line ends: the beginning shown is cut at a line end.
        self._line_ends = [match.start() for match in re.finditer("\n", text)] + [len(text)]
        self._index = Bm25Index()
        self._index.add_many(
            [
                MemoryItem(
                    id=f"{PIECE_ID_PREFIX}{number}",
                    layer=MemoryLayer.SEMANTIC,
                    type="long_term",
                    content=" ".join([*piece.headings, piece.text]),
                )
                for number, piece in enumerate(self.pieces)
            ]
        )
        self._heads: dict[tuple[int, float], int] = {}

    def head_end(self, tokens: int, estimator: TokenEstimator, model: str | None) -> int:
        """Where the beginning that fits `tokens` ends: at the end of the last whole line that fits (0: none)."""
        key = (tokens, estimator.ratio_for(model))
        end = self._heads.get(key)
        if end is None:
            ends = self._line_ends
            fits = bisect.bisect_right(
                range(len(ends)), False, key=lambda i: estimator.text(self.text[: ends[i]], model) > tokens
            )
            end = ends[fits - 1] if fits else 0
            self._heads[key] = end
        return end

    def relevant(self, query: str, after: int) -> list[LongTermPiece]:
        """The pieces not wholly before character `after` that `query` is about, most relevant first."""
        found = self._index.search(query, RELEVANT_CANDIDATES)
        ranked = sorted(found.items(), key=lambda pair: pair[1], reverse=True)
        pieces = (self.pieces[int(item_id.removeprefix(PIECE_ID_PREFIX))] for item_id, _ in ranked)
        return [piece for piece in pieces if piece.end > after]


def whole_long_term(text: str) -> LongTermPrompt:
    """MEMORY.md that fits its share: all of it leads the prompt."""
    return LongTermPrompt(text, "", LongTermUse(len(text), len(text)))


def long_term_prompt(
    index: LongTermIndex,
    query: str,
    cap_tokens: int,
    relevant_share: float,
    estimator: TokenEstimator,
    model: str | None,
) -> LongTermPrompt:
    """MEMORY.md (the indexed text) within `cap_tokens`: whole when it fits; else its beginning and a marker
    saying the rest is reached by relevance, and within `relevant_share` of the cap the pieces from the
    rest most relevant to `query`, in file order."""
    text = index.text
    if estimator.text(text, model) <= cap_tokens:
        return whole_long_term(text)
    relevant_cap = int(cap_tokens * relevant_share)
    marker_room = estimator.text(_marker(len(text)), model)
    end = index.head_end(max(cap_tokens - relevant_cap - marker_room, 0), estimator, model)
    head = f"{text[:end].rstrip()}\n{_marker(len(text) - end)}" if end else _marker(len(text))
    chosen: list[LongTermPiece] = []
    room = relevant_cap - estimator.text(RELEVANT_HEADER, model)
    for piece in index.relevant(query, end):
        cost = estimator.text(piece.rendered(), model) + 1
        if cost <= room:
            chosen.append(piece)
            room -= cost
    chosen.sort(key=lambda piece: piece.start)
    relevant = "\n".join([RELEVANT_HEADER, *(piece.rendered() for piece in chosen)]) if chosen else ""
    use = LongTermUse(len(text), end, sum(len(piece.text) for piece in chosen), len(chosen))
    return LongTermPrompt(head, relevant, use)


def _marker(rest_chars: int) -> str:
    return (
        f"[… MEMORY.md goes on for {rest_chars:,} more characters, over its share of the prompt: the parts "
        "relevant to each message are brought in with it]"
    )

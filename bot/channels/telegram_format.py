"""Turn the model's Markdown into what Telegram accepts: plain text plus `MessageEntity` dicts, in parts.

Why text + entities and not `parse_mode`: with `parse_mode` every stray `<`, `&` or unbalanced `*` in a
reply is a chance for Telegram's "can't parse entities" error. With `entities` the text is sent as is and
the formatting travels beside it, so nothing in the text can break parsing.

Why our own renderer over markdown-it-py tokens (and not a converter package):

- markdown-it-py (executablebooks, maintained, CommonMark-compliant, typed, pure Python) does the
  parsing. With `html=False` it never treats `<div>` or `List<String>` as markup: they stay text.
- The step from tokens to entities is about 250 lines here. The packages that do it were measured on
  model-style replies and each failed on something we need:
  * telegramify-markdown `convert()` silently drops literal `<tag>`-like text;
  * chatgpt-md-converter (Markdown -> Telegram HTML) left a stray `</span>`;
  * sulguk (HTML -> entities, fed by markdown-it-py's HTML) is good, but raises
    `ValueError: Unsupported tag: table` on any GFM table (so tables must be turned off and collapse into
    one line of pipes), upper-cases `#` headings (changes the words), emits both `pre` and `code` for
    every code block, goes through an HTML round trip, and brings lxml and html5lib with it.
- Our renderer counts offsets itself, so it can also split the *rendered* text: each part is cut from
  the finished text and its entities are clipped to the part, which makes every part valid on its own
  (a code block cut in two becomes two `pre` entities with the same language).

Rendering choices: headings are bold; list items get `•`/`◦`/`▪` or their number, nested items are
indented; block quotes become a `blockquote` entity; tables become a monospaced `pre` block with
aligned columns (Telegram has no tables); links become `text_link` when Telegram accepts the URL
(http/https with a dotted host), otherwise the URL is written after the link text so it is not lost;
images become a link on their alt text; single newlines are kept (the model means them); tabs in code
are expanded. HTML character references (`&amp;`) are decoded as CommonMark says; bare `&`, `<`, `>`
come through literally.

Telegram measures the 4096-character limit in UTF-16 code units; internally everything is indexed by
Python code points and converted to UTF-16 offsets only when entities are emitted. What the server does
with what we send (tdlib's fix_formatted_text): it trims leading/trailing spaces and newlines, but not
past the first entity (a continued code block keeps its indentation); it drops whitespace-only
entities; it repairs nesting it dislikes (e.g. bold around inline code) instead of failing; it fails
only on entities outside the text or splitting a surrogate pair, and on bad text_link URLs.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "TELEGRAM_MESSAGE_LIMIT",
    "TelegramText",
    "plain_text_parts",
    "render_markdown",
    "split_for_telegram",
    "utf16_len",
]

TELEGRAM_MESSAGE_LIMIT = 4096

# markdown-it's block parser silently drops what is nested deeper than this. 100 levels is far beyond
# any real reply and keeps the parser's recursion well inside Python's stack; a reply that reaches the
# limit is sent as plain text instead of losing its deepest part (see `_render`).
_MAX_NESTING = 100
_PARSER = MarkdownIt("commonmark", {"html": False, "maxNesting": _MAX_NESTING}).enable(["table", "strikethrough"])

# Telegram rejects the whole message (400) when a text_link URL fails its check: tdlib's
# LinkManager::check_link wants an http(s) URL whose host has a dot (or is IPv6). Anything else is shown
# as text instead of risking that.
_LINK_SCHEMES = frozenset({"http", "https"})
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._~:")
_BULLETS = ("•", "◦", "▪")
_RULE = "——————————"
_STYLE_TAGS = {"strong": "bold", "em": "italic", "s": "strikethrough"}
_BLOCK_STARTS = frozenset({"paragraph_open", "heading_open", "hr", "fence", "code_block", "table_open"})


@dataclass(frozen=True)
class TelegramText:
    """One message for `sendMessage(text=..., entities=json.dumps(entities))`.

    Entity dicts use the Bot API field names (`type`, `offset`, `length`, and `url` / `language` where
    they apply); offsets and lengths are in UTF-16 code units.
    """

    text: str
    entities: list[dict[str, object]]


def utf16_len(text: str) -> int:
    """Length of `text` as Telegram counts it: UTF-16 code units (an emoji outside the BMP counts 2)."""
    return len(text.encode("utf-16-le")) // 2


def render_markdown(markdown: str) -> TelegramText:
    """Convert a whole Markdown reply into Telegram text + entities, without any length limit."""
    text, spans = _render(markdown)
    return _make_part(text, spans, _utf16_offsets(text), 0, len(text))


def split_for_telegram(markdown: str, limit: int = TELEGRAM_MESSAGE_LIMIT) -> list[TelegramText]:
    """Render a Markdown reply and cut it into messages of at most `limit` UTF-16 units each.

    Cuts go on paragraph breaks first, then line breaks, then spaces, and only then anywhere (never in
    the middle of a character or, where possible, of an emoji sequence). Code blocks are only cut when
    one does not fit in a message; each piece is then its own `pre` entity with the block's language.
    Entities never cross a part boundary, parts are never empty, and only whitespace at cuts is dropped.
    Markdown whose rendering holds no text (an empty code block, a lone `#`) is sent as its source, plain:
    Telegram refuses an empty message, and a reply that is not blank must reach the chat.
    """
    _check_limit(limit)
    text, spans = _render(markdown)
    offsets = _utf16_offsets(text)
    code_blocks = sorted((span.start, span.end) for span in spans if span.type == "pre")
    segments = _segments(text, offsets, limit, code_blocks)
    parts = [_make_part(text, spans, offsets, start, end) for start, end in segments]
    if parts or not markdown.strip():
        return parts
    return [TelegramText(piece, []) for piece in plain_text_parts(markdown.strip(), limit)]


def plain_text_parts(text: str, limit: int = TELEGRAM_MESSAGE_LIMIT) -> list[str]:
    """Cut raw text (the Markdown as is) into parts of at most `limit` UTF-16 units, without entities.

    The fallback for when Telegram rejects the entities: same cut preferences as `split_for_telegram`
    (paragraph, line, space, anywhere); no part is empty.
    """
    _check_limit(limit)
    offsets = _utf16_offsets(text)
    return [text[start:end] for start, end in _segments(text, offsets, limit, [])]


# --- rendering ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    """A finished entity in code-point offsets of the rendered text."""

    type: str
    start: int
    end: int
    url: str | None = None
    language: str | None = None


@dataclass
class _OpenSpan:
    """An entity being rendered; `start` is set by the first character written inside it."""

    type: str
    emit: bool
    url: str | None = None
    language: str | None = None
    start: int | None = None


@dataclass
class _ListLevel:
    ordered: bool
    depth: int


@dataclass
class _LinkState:
    url: str
    opens_in_telegram: bool
    start: int
    first_chunk: int


class _Renderer:
    """Walks markdown-it's token stream once, writing text and recording entity spans as it goes."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.pos = 0  # code points written so far
        self.spans: list[_Span] = []
        self._open: list[_OpenSpan] = []
        # Line breaks between blocks are written lazily, so the text never starts or ends with them.
        self._pending_breaks = 0
        self._indents = [""]
        self._lists: list[_ListLevel] = []
        self._links: list[_LinkState] = []
        self._quote_depth = 0
        self._at_item_start = False
        self._table: list[list[str]] | None = None
        self._block_handlers: dict[str, Callable[[Token], None]] = {
            "inline": lambda token: self._inline(token.children or []),
            "heading_open": lambda _: self._open_span("bold"),
            "heading_close": lambda _: self._close_span("bold"),
            "bullet_list_open": self._list_open,
            "ordered_list_open": self._list_open,
            "bullet_list_close": self._list_close,
            "ordered_list_close": self._list_close,
            "list_item_open": self._list_item_open,
            "list_item_close": self._list_item_close,
            "blockquote_open": self._quote_open,
            "blockquote_close": self._quote_close,
            "fence": lambda token: self._code_block(token.content, _fence_language(token.info)),
            "code_block": lambda token: self._code_block(token.content, None),
            "hr": lambda _: self._write(_RULE),
            "table_open": self._table_open,
        }

    def render(self, tokens: Sequence[Token]) -> tuple[str, list[_Span]]:
        for token in tokens:
            self._block(token)
        return "".join(self.chunks), self.spans

    # Block tokens.

    def _block(self, token: Token) -> None:
        if self._table is not None:
            self._table_token(token)
            return
        if token.type in _BLOCK_STARTS:
            self._break(self._gap())
        handler = self._block_handlers.get(token.type)
        if handler is not None:
            handler(token)

    def _list_open(self, token: Token) -> None:
        self._break(self._gap())
        self._lists.append(_ListLevel(ordered=token.type == "ordered_list_open", depth=len(self._lists)))

    def _list_close(self, _: Token) -> None:
        self._lists.pop()
        self._break(self._gap())

    def _list_item_close(self, _: Token) -> None:
        self._indents.pop()
        self._at_item_start = False

    def _quote_open(self, _: Token) -> None:
        self._break(self._gap())
        # Telegram cannot nest block quotes: only the outermost one becomes an entity.
        self._open_span("blockquote", emit=self._quote_depth == 0)
        self._quote_depth += 1

    def _quote_close(self, _: Token) -> None:
        self._quote_depth -= 1
        self._close_span("blockquote")

    def _table_open(self, _: Token) -> None:
        self._table = []

    def _gap(self) -> int:
        """Blank line between top-level blocks; inside lists a plain line break keeps items together."""
        return 1 if self._lists else 2

    def _list_item_open(self, token: Token) -> None:
        level = self._lists[-1]
        if level.ordered:
            marker = f"{token.info or '1'}{token.markup or '.'}"
        else:
            marker = _BULLETS[min(level.depth, len(_BULLETS) - 1)]
        self._break(1)
        self._at_item_start = False
        self._write(marker + " ")
        # Continuation lines of the item line up under its text, after the marker.
        self._indents.append(self._indents[-1] + " " * (len(marker) + 1))
        self._at_item_start = True

    def _code_block(self, content: str, language: str | None) -> None:
        # Telegram turns every tab into a single space, which would flatten tab-indented code.
        code = content.rstrip("\n").expandtabs(4)
        if not code.strip():
            return
        self._open_span("pre", language=language)
        self._write(code, raw=True)
        self._close_span("pre")

    def _table_token(self, token: Token) -> None:
        assert self._table is not None
        if token.type == "tr_open":
            self._table.append([])
        elif token.type == "inline" and self._table:
            self._table[-1].append(_inline_plain(token.children or []))
        elif token.type == "table_close":
            rows, self._table = self._table, None
            if rows:
                self._code_block(_format_table(rows), None)

    # Inline tokens.

    def _inline(self, children: Sequence[Token]) -> None:
        for child in children:
            self._inline_token(child)

    def _inline_token(self, token: Token) -> None:
        kind = token.type
        tag = _STYLE_TAGS.get(token.tag)
        if kind in ("text", "text_special", "html_inline"):
            self._write(token.content)
        elif kind in ("softbreak", "hardbreak"):
            self._write("\n")
        elif kind == "code_inline":
            self._open_span("code")
            self._write(token.content)
            self._close_span("code")
        elif tag is not None and kind.endswith("_open"):
            self._open_span(tag)
        elif tag is not None and kind.endswith("_close"):
            self._close_span(tag)
        elif kind == "link_open":
            self._open_link(str(token.attrGet("href") or ""))
        elif kind == "link_close":
            self._close_link()
        elif kind == "image":
            self._open_link(str(token.attrGet("src") or ""))
            self._write(token.content)
            self._close_link()
        elif token.content:
            # Unknown token kinds (future plugins): keep their text rather than lose it.
            self._write(token.content)

    def _open_link(self, url: str) -> None:
        opens = _opens_in_telegram(url)
        self._links.append(_LinkState(url=url, opens_in_telegram=opens, start=self.pos, first_chunk=len(self.chunks)))
        self._open_span("text_link", emit=opens, url=url)

    def _close_link(self) -> None:
        link = self._links.pop()
        if self.pos == link.start and link.url:
            self._write(link.url)  # `[](url)`: the URL is the only visible text
        self._close_span("text_link")
        # A link Telegram cannot open is shown as text; its URL follows unless the text already is it.
        if not link.opens_in_telegram and link.url:
            shown = "".join(self.chunks[link.first_chunk :])
            if link.url.removeprefix("mailto:") not in shown:
                self._write(f" ({link.url})")

    # Writing text and spans.

    def _break(self, newlines: int) -> None:
        # Right after a list marker the item's first block continues the marker's line.
        if not self._at_item_start:
            self._pending_breaks = max(self._pending_breaks, newlines)

    def _write(self, text: str, raw: bool = False) -> None:
        """Append text; `raw` (code) is written verbatim, other text is indented inside list items."""
        if not text:
            return
        if self._pending_breaks and self.pos > 0:
            self._emit("\n" * self._pending_breaks + ("" if raw else self._indents[-1]))
        self._pending_breaks = 0
        self._at_item_start = False
        for span in self._open:
            if span.start is None:
                span.start = self.pos
        if not raw and "\n" in text:
            text = text.replace("\n", "\n" + self._indents[-1])
        self._emit(text)

    def _emit(self, text: str) -> None:
        self.chunks.append(text)
        self.pos += len(text)

    def _open_span(self, kind: str, emit: bool = True, url: str | None = None, language: str | None = None) -> None:
        # A span inside one of its own kind (bold text in a heading) adds nothing Telegram would show.
        emit = emit and not any(span.type == kind and span.emit for span in self._open)
        self._open.append(_OpenSpan(type=kind, emit=emit, url=url, language=language))

    def _close_span(self, kind: str) -> None:
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index].type == kind:
                span = self._open.pop(index)
                if span.emit and span.start is not None and self.pos > span.start:
                    self.spans.append(_Span(kind, span.start, self.pos, span.url, span.language))
                return


# What may make a line Markdown rather than plain text: a character that can begin inline syntax, an entity or
# an escape, a line break, a tab or NUL, or at either end a space, or at the start what can begin a block
# (a list, a heading, a rule). A line with none of them renders as itself.
_MAYBE_MARKDOWN = re.compile(r"[\\`*_\[\]<>#|~&\n\r\t\x00]|^[\s\-+=\d]|\s$")


def _render(markdown: str) -> tuple[str, list[_Span]]:
    """Rendered text and spans; pathologically nested input comes back as its own plain text."""
    if markdown and _MAYBE_MARKDOWN.search(markdown) is None:
        return markdown, []  # most short replies: the parser's tenth of a millisecond is not needed
    return _parsed(markdown)


def _parsed(markdown: str) -> tuple[str, list[_Span]]:
    try:
        tokens = _PARSER.parse(markdown)
    except RecursionError:
        return markdown.strip(), []
    if any(token.level >= _MAX_NESTING - 1 for token in tokens):
        # The parser stopped descending here and dropped the rest: unformatted beats incomplete.
        return markdown.strip(), []
    return _Renderer().render(tokens)


def _fence_language(info: str) -> str | None:
    """The language of a fenced block is the first word of its info string (```python title=x)."""
    words = info.split()
    return words[0] if words else None


def _opens_in_telegram(url: str) -> bool:
    """Whether Telegram will accept `url` in a text_link (see `_LINK_SCHEMES`)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return False
    if parts.scheme.lower() not in _LINK_SCHEMES or not set(host) <= _HOST_CHARS:
        return False
    return "." in host.strip(".") or ":" in host


def _inline_plain(children: Sequence[Token]) -> str:
    """Inline content as plain text, for places that cannot hold entities (table cells)."""
    pieces: list[str] = []
    links: list[tuple[str, int]] = []
    for child in children:
        if child.type in ("softbreak", "hardbreak"):
            pieces.append(" ")
        elif child.type == "link_open":
            links.append((str(child.attrGet("href") or ""), len(pieces)))
        elif child.type == "link_close" and links:
            # No entity can carry the URL inside a table, so it is written out unless already shown.
            url, first = links.pop()
            if url and url.removeprefix("mailto:") not in "".join(pieces[first:]):
                pieces.append(f" ({url})")
        elif child.content:
            pieces.append(child.content)
    return "".join(pieces).strip()


def _format_table(rows: list[list[str]]) -> str:
    """Rows as aligned columns; widths are in code points, so wide characters may misalign a little."""
    columns = max(len(row) for row in rows)
    padded = [row + [""] * (columns - len(row)) for row in rows]
    widths = [max(len(row[col]) for row in padded) for col in range(columns)]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in padded]
    if len(lines) > 1:
        lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


# --- splitting ---------------------------------------------------------------------------------------


def _check_limit(limit: int) -> None:
    # Below 2 an emoji (two UTF-16 units) could never fit and no split would make progress.
    if limit < 2:
        raise ValueError(f"limit must be at least 2 UTF-16 units, got {limit}")


def _utf16_offsets(text: str) -> list[int]:
    """offsets[i] is the UTF-16 offset of code point i; offsets[len(text)] is the total length."""
    offsets = [0] * (len(text) + 1)
    total = 0
    for index, char in enumerate(text):
        total += 2 if ord(char) > 0xFFFF else 1
        offsets[index + 1] = total
    return offsets


def _segments(text: str, offsets: list[int], limit: int, protected: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Yield (start, end) code-point ranges of the parts; `protected` ranges are cut only if too long."""
    size = len(text)
    start = _skip(text, 0, "\n")
    while start < size:
        # The furthest end whose UTF-16 length from `start` still fits.
        hard_end = bisect.bisect_right(offsets, offsets[start] + limit, lo=start) - 1
        if hard_end >= size:
            cut, resume = size, size
        else:
            cut, resume = _choose_cut(text, start, hard_end, protected)
        end = cut
        while end > start and text[end - 1] in " \t\n":
            end -= 1
        if end > start:
            yield start, end
        start = _skip(text, resume, "\n")


def _choose_cut(text: str, start: int, hard_end: int, protected: list[tuple[int, int]]) -> tuple[int, int]:
    """Where to end the part beginning at `start` and where the next one resumes."""
    for separator in ("\n\n", "\n"):
        cut = _last_separator(text, separator, start, hard_end, protected)
        if cut is not None:
            return cut, cut
    cut = _last_line_in_code(text, start, hard_end)
    if cut is not None:
        return cut, cut
    space = text.rfind(" ", start + 1, hard_end + 1)
    if space != -1:
        return space, _skip(text, space, " ")
    cut = _grapheme_safe_cut(text, start, hard_end)
    return cut, cut


def _last_separator(
    text: str, separator: str, start: int, hard_end: int, protected: list[tuple[int, int]]
) -> int | None:
    """Last position in (start, hard_end] where `separator` begins outside every protected range."""
    end = hard_end + len(separator)
    while True:
        found = text.rfind(separator, start + 1, end)
        if found == -1:
            return None
        if not _inside(found, protected):
            return found
        end = found + len(separator) - 1


def _last_line_in_code(text: str, start: int, hard_end: int) -> int | None:
    """A line break inside a code block that is too long for one message.

    A part beginning with an indented line is fine (Telegram keeps leading spaces inside `pre`), but a
    cut before a top-level line (a new statement) reads better, so one is preferred when it is in the
    second half of the window.
    """
    last = text.rfind("\n", start + 1, hard_end + 1)
    if last == -1:
        return None
    halfway = start + (hard_end - start) // 2
    candidate = last
    while candidate > halfway:
        if candidate + 1 < len(text) and not text[candidate + 1].isspace():
            return candidate
        candidate = text.rfind("\n", start + 1, candidate)
    return last


def _grapheme_safe_cut(text: str, start: int, cut: int) -> int:
    """Move a hard cut back so it does not separate an accent, emoji modifier or ZWJ sequence."""
    position = cut
    while position > start + 1 and _continues_cluster(text, position):
        position -= 1
    return position if position > start + 1 else cut


def _continues_cluster(text: str, position: int) -> bool:
    char = ord(text[position])
    return (
        unicodedata.combining(text[position]) != 0
        or text[position - 1] == "\u200d"
        or char == 0x200D
        or 0xFE00 <= char <= 0xFE0F  # variation selectors
        or 0x1F3FB <= char <= 0x1F3FF  # skin-tone modifiers
        or 0xE0020 <= char <= 0xE007F  # tag characters (subdivision flags)
    )


def _inside(position: int, ranges: list[tuple[int, int]]) -> bool:
    """True when a cut at `position` would fall strictly inside one of the sorted, disjoint ranges."""
    index = bisect.bisect_left(ranges, (position, position)) - 1
    return index >= 0 and ranges[index][0] < position < ranges[index][1]


def _skip(text: str, position: int, chars: str) -> int:
    while position < len(text) and text[position] in chars:
        position += 1
    return position


def _make_part(text: str, spans: list[_Span], offsets: list[int], start: int, end: int) -> TelegramText:
    """The text between `start` and `end` with every span clipped to it, offsets in UTF-16 units."""
    base = offsets[start]
    entities: list[tuple[int, int, dict[str, object]]] = []
    for span in spans:
        left, right = max(span.start, start), min(span.end, end)
        if left >= right:
            continue
        entity: dict[str, object] = {
            "type": span.type,
            "offset": offsets[left] - base,
            "length": offsets[right] - offsets[left],
        }
        if span.url is not None:
            entity["url"] = span.url
        if span.language:
            entity["language"] = span.language
        entities.append((left, -right, entity))
    # Outer entities before inner ones at the same offset, as Telegram itself orders them.
    entities.sort(key=lambda item: (item[0], item[1]))
    return TelegramText(text=text[start:end], entities=[entity for _, _, entity in entities])

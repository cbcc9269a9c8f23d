"""Markdown -> Telegram text + entities, and splitting replies into messages Telegram accepts."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.channels.telegram_format import (
    TelegramText,
    _parsed,
    _render,
    plain_text_parts,
    render_markdown,
    split_for_telegram,
    utf16_len,
)

LIMIT = 4096


def entity_text(part: TelegramText, entity: dict[str, object]) -> str:
    """The characters an entity covers, cut by UTF-16 offsets as Telegram does."""
    offset, length = entity["offset"], entity["length"]
    assert isinstance(offset, int) and isinstance(length, int)
    units = part.text.encode("utf-16-le")
    return units[2 * offset : 2 * (offset + length)].decode("utf-16-le")


def entities_of(part: TelegramText, kind: str) -> list[dict[str, object]]:
    return [entity for entity in part.entities if entity["type"] == kind]


def assert_valid(part: TelegramText, limit: int = LIMIT) -> None:
    """What Telegram needs from one message: fits, not blank, entities inside it and properly nested."""
    size = utf16_len(part.text)
    assert 0 < size <= limit
    assert part.text.strip()
    ranges = []
    for entity in part.entities:
        offset, length = entity["offset"], entity["length"]
        assert isinstance(offset, int) and isinstance(length, int)
        assert offset >= 0 and length > 0 and offset + length <= size, entity
        # Never a lone half of a surrogate pair at either end.
        entity_text(part, entity)
        if entity["type"] == "text_link":
            assert isinstance(entity["url"], str) and entity["url"]
        ranges.append((offset, offset + length))
    for a_start, a_end in ranges:
        for b_start, b_end in ranges:
            disjoint = a_end <= b_start or b_end <= a_start
            nested = (a_start <= b_start and b_end <= a_end) or (b_start <= a_start and a_end <= b_end)
            assert disjoint or nested, (a_start, a_end, b_start, b_end)


def squash(text: str) -> str:
    return "".join(text.split())


def assert_in_order(words: list[str], text: str) -> None:
    position = 0
    for word in words:
        found = text.find(word, position)
        assert found != -1, f"{word!r} lost or out of order"
        position = found + len(word)


# --- utf16_len and rendering ------------------------------------------------------------------------


def test_utf16_len_counts_surrogate_pairs_twice() -> None:
    assert utf16_len("") == 0
    assert utf16_len("abc") == 3
    assert utf16_len("é") == 1
    assert utf16_len("a😀") == 3
    assert utf16_len("👍🏽") == 4


def test_empty_input() -> None:
    assert render_markdown("") == TelegramText(text="", entities=[])
    assert split_for_telegram("") == []
    assert split_for_telegram("  \n\n \n") == []
    assert plain_text_parts("") == []
    assert plain_text_parts(" \n\n ") == []


def test_markdown_that_renders_to_nothing_is_sent_as_its_source() -> None:
    # An empty code block or a lone heading mark holds no text once rendered: Telegram refuses an empty message.
    assert split_for_telegram("```\n```") == [TelegramText("```\n```", [])]
    assert split_for_telegram("  #  ") == [TelegramText("#", [])]


def test_code_block_keeps_language_and_content() -> None:
    code = 'if a < b and c > d:\n    print("<div>&amp;</div>")'
    result = render_markdown(f"Look:\n\n```python\n{code}\n```\n\nDone.")
    assert result.text == f"Look:\n\n{code}\n\nDone."
    (pre,) = entities_of(result, "pre")
    assert pre["language"] == "python"
    assert entity_text(result, pre) == code
    assert_valid(result)


def test_tabs_in_code_become_spaces_so_indentation_survives() -> None:
    # Telegram replaces each tab by one space; expanding first keeps Go/Makefile indentation visible.
    result = render_markdown("```go\nfunc f() {\n\treturn\n}\n```")
    assert result.text == "func f() {\n    return\n}"


def test_code_block_without_language_has_no_language_field() -> None:
    result = render_markdown("```\nx = 1\n```")
    assert result.entities == [{"type": "pre", "offset": 0, "length": 5}]


def test_html_like_text_and_special_characters_come_through_literally() -> None:
    source = "Use List<String> & Map<K, V> inside a <div>; 1 < 2 > 0 && <b>not bold</b> </span>"
    result = render_markdown(source)
    assert result.text == source
    assert result.entities == []


def test_inline_code_keeps_angle_brackets() -> None:
    result = render_markdown('Write `<div class="x">&nbsp;</div>` here')
    (code,) = entities_of(result, "code")
    assert entity_text(result, code) == '<div class="x">&nbsp;</div>'


def test_bold_italic_code_offsets_after_emoji() -> None:
    result = render_markdown("😀👍🏽 **bold** then *it* and `x<y>` ~~old~~ 🎉 **end**")
    assert result.text == "😀👍🏽 bold then it and x<y> old 🎉 end"
    assert [(e["type"], e["offset"], e["length"]) for e in result.entities] == [
        # 😀 is 2 units and 👍🏽 is 4: bold starts at 7, not at the 4 a code-point count would give.
        ("bold", 7, 4),
        ("italic", 17, 2),
        ("code", 24, 4),
        ("strikethrough", 29, 3),
        ("bold", 36, 3),
    ]
    assert [entity_text(result, e) for e in result.entities] == ["bold", "it", "x<y>", "old", "end"]
    assert_valid(result)


def test_nested_bold_and_italic() -> None:
    result = render_markdown("**bold *both* bold**")
    assert result.text == "bold both bold"
    assert [(e["type"], entity_text(result, e)) for e in result.entities] == [
        ("bold", "bold both bold"),
        ("italic", "both"),
    ]


def test_headings_are_bold_lines() -> None:
    result = render_markdown("# Title\nIntro text\n\n## Part **two**\n\nBody")
    assert result.text == "Title\n\nIntro text\n\nPart two\n\nBody"
    assert [entity_text(result, e) for e in entities_of(result, "bold")] == ["Title", "Part two"]
    assert_valid(result)


def test_nested_lists_are_indented() -> None:
    source = "- fruit\n  - apple\n    - green <b>\n  - pear\n- veg\n\n1. one\n2. two\n   continued"
    result = render_markdown(source)
    assert result.text.splitlines() == [
        "• fruit",
        "  ◦ apple",
        "    ▪ green <b>",
        "  ◦ pear",
        "• veg",
        "",
        "1. one",
        "2. two",
        "   continued",
    ]


def test_links_become_text_links() -> None:
    result = render_markdown("See [the docs](https://example.com/a?b=1&c=2) and <https://x.org/y>.")
    assert result.text == "See the docs and https://x.org/y."
    links = entities_of(result, "text_link")
    assert [(entity_text(result, e), e["url"]) for e in links] == [
        ("the docs", "https://example.com/a?b=1&c=2"),
        ("https://x.org/y", "https://x.org/y"),
    ]


def test_link_telegram_would_reject_keeps_its_url_as_text() -> None:
    # Telegram answers 400 to a text_link whose URL is relative, not http(s), or has a dotless host.
    result = render_markdown(
        "Open [the file](notes/todo.md), mail <me@example.org>, see [dev](http://localhost:8080/x)"
        " or [ftp](ftp://files.example.org/a)"
    )
    assert result.text == (
        "Open the file (notes/todo.md), mail me@example.org, see dev (http://localhost:8080/x)"
        " or ftp (ftp://files.example.org/a)"
    )
    assert result.entities == []


def test_blockquote_entity() -> None:
    result = render_markdown("Before\n\n> quoted **line**\n> more\n\nAfter")
    (quote,) = entities_of(result, "blockquote")
    assert entity_text(result, quote) == "quoted line\nmore"
    assert_valid(result)


def test_table_becomes_aligned_monospace_block() -> None:
    result = render_markdown("| Name | Qty |\n|---|---|\n| apple | 10 |\n| kiwi <3 | 2 |")
    (pre,) = entities_of(result, "pre")
    assert entity_text(result, pre).splitlines() == [
        "Name    | Qty",
        "--------+----",
        "apple   | 10",
        "kiwi <3 | 2",
    ]


def test_deeply_nested_input_falls_back_to_plain_text_without_loss() -> None:
    source = ">" * 150 + " the deepest words"
    result = render_markdown(source)
    assert "the deepest words" in result.text
    assert_valid(result)


# --- splitting rendered replies ---------------------------------------------------------------------


def long_reply() -> tuple[str, str]:
    """About 9,000 characters: prose paragraphs around a 4,800-character Python code block."""
    prose = [
        f"Paragraph {n}: **step {n}** explains `func_{n}()` with List<String> & <div> details, "
        + "and more words to read " * 8
        for n in range(20)
    ]
    code = "\n".join(f"def func_{n}(x):\n    return x * {n}  # <{n}> & done\n" for n in range(90))
    source = "\n\n".join(prose[:10]) + f"\n\n```python\n{code}\n```\n\n" + "\n\n".join(prose[10:])
    return source, code


def test_long_reply_is_split_into_valid_parts() -> None:
    source, _ = long_reply()
    assert 9000 <= len(source) < 10_000
    parts = split_for_telegram(source)
    assert len(parts) >= 3
    for part in parts:
        assert_valid(part)
    rendered = render_markdown(source)
    assert squash("".join(part.text for part in parts)) == squash(rendered.text)
    assert_in_order(re.findall(r"\w+", source.replace("```python", "")), "\n".join(p.text for p in parts))


def test_long_code_block_is_split_into_code_blocks_with_its_language() -> None:
    source, code = long_reply()
    parts = split_for_telegram(source)
    pieces = [(part, pre) for part in parts for pre in entities_of(part, "pre")]
    assert len(pieces) >= 2
    assert all(pre["language"] == "python" for _, pre in pieces)
    texts = [entity_text(part, pre) for part, pre in pieces]
    # Cut between lines (only blank lines at a cut may go), indentation intact...
    joined = "\n".join(texts)
    assert [line for line in joined.split("\n") if line] == [line for line in code.split("\n") if line]
    # ...and preferably before a top-level line, so each piece reads as code on its own.
    assert all(text.startswith("def func_") for text in texts)


def test_prose_is_cut_only_between_paragraphs() -> None:
    paragraphs = [f"Paragraph {n} " + "lorem ipsum dolor " * 20 + "end." for n in range(40)]
    parts = split_for_telegram("\n\n".join(paragraphs))
    assert len(parts) > 1
    for part in parts:
        assert_valid(part)
        assert part.text.startswith("Paragraph ") and part.text.endswith("end.")


def test_short_code_block_is_not_cut() -> None:
    code = "\n".join(f"line_{n} = {n}" for n in range(150))
    source = "intro words here\n\n" * 100 + f"```js\n{code}\n```\n\n" + "outro\n\n" * 50
    parts = split_for_telegram(source, limit=2500)
    pres = [(part, pre) for part in parts for pre in entities_of(part, "pre")]
    assert len(pres) == 1
    assert entity_text(*pres[0]) == code


def test_entity_cut_by_a_boundary_is_clipped_into_both_parts() -> None:
    source = "**" + " ".join(f"word{n}" for n in range(400)) + "**"
    parts = split_for_telegram(source, limit=500)
    assert len(parts) > 1
    for part in parts:
        assert_valid(part, 500)
        (bold,) = part.entities
        assert bold["type"] == "bold" and bold["offset"] == 0
        assert bold["length"] == utf16_len(part.text)


def test_fitting_reply_is_one_part_identical_to_render() -> None:
    source = "# Hi\n\nSome *text* with a [link](https://example.com)."
    assert split_for_telegram(source) == [render_markdown(source)]


def test_enormous_single_line_is_hard_split() -> None:
    line = "x" * 20_000
    parts = split_for_telegram(line)
    assert [utf16_len(part.text) for part in parts] == [4096, 4096, 4096, 4096, 3616]
    assert "".join(part.text for part in parts) == line

    words = " ".join(f"w{n}" for n in range(5000))
    word_parts = split_for_telegram(words)
    assert all(utf16_len(part.text) <= LIMIT for part in word_parts)
    assert " ".join(part.text for part in word_parts) == words


def test_hard_split_never_breaks_an_emoji() -> None:
    emoji = "😀" * 5000 + "👍🏽" * 100 + "é" * 50
    parts = split_for_telegram(emoji, limit=999)
    for part in parts:
        assert_valid(part, 999)
        part.text.encode("utf-8")  # no lone surrogates
        assert not part.text.startswith("🏽")
    assert "".join(part.text for part in parts) == emoji


def test_limit_too_small_is_rejected() -> None:
    with pytest.raises(ValueError):
        split_for_telegram("text", limit=1)
    with pytest.raises(ValueError):
        plain_text_parts("text", limit=0)


# --- plain text fallback ----------------------------------------------------------------------------


def test_plain_text_parts_prefers_paragraphs_then_lines() -> None:
    first, second = "a" * 3000, "b" * 3000
    assert plain_text_parts(f"{first}\n\n{second}") == [first, second]
    lines = "\n".join(f"line {n} **raw** <b>" for n in range(600))
    parts = plain_text_parts(lines)
    assert len(parts) > 1
    for part in parts:
        assert utf16_len(part) <= LIMIT
        assert part.startswith("line ") and part.endswith("**raw** <b>")
    assert "\n".join(parts) == lines


def test_plain_text_parts_hard_split_and_small_input() -> None:
    assert plain_text_parts("**just** <this>") == ["**just** <this>"]
    blob = "🙂" * 3000
    parts = plain_text_parts(blob)
    assert "".join(parts) == blob
    assert all(utf16_len(part) <= LIMIT for part in parts)


# --- property-style check over generated replies ----------------------------------------------------

VOCABULARY = [
    "alpha", "beta", "gamma", "привет", "мир", "日本語", "😀", "👍🏽", "🇺🇦", "<div>", "List<String>",
    "a&b", "x>y", "1<2", "&", "<", ">", "café", "naïve", "Map<K,V>", "</span>",
]  # fmt: skip


def random_words(rng: random.Random, words: list[str], count: int) -> str:
    # The "w" prefix keeps a word like ">" or "1<2" from being read as block syntax at a line start.
    chosen = [f"w{rng.randrange(1000)}{rng.choice(VOCABULARY)}" for _ in range(count)]
    words.extend(chosen)
    return " ".join(chosen)


def random_inline(rng: random.Random, words: list[str]) -> str:
    pieces = []
    for _ in range(rng.randint(1, 12)):
        text = random_words(rng, words, rng.randint(1, 6))
        style = rng.random()
        if style < 0.15:
            text = f"**{text}**"
        elif style < 0.25:
            text = f"*{text}*"
        elif style < 0.32:
            text = f"[{text}](https://example.com/{rng.randrange(100)})"
        elif style < 0.38:
            text = f"`{text}`"
        pieces.append(text)
    return " ".join(pieces)


def random_block(rng: random.Random, words: list[str]) -> str:
    kind = rng.choice(["para", "para", "para", "heading", "list", "code", "quote", "table", "long"])
    if kind == "heading":
        return "#" * rng.randint(1, 3) + " " + random_words(rng, words, rng.randint(1, 5))
    if kind == "list":
        lines = []
        for _ in range(rng.randint(1, 8)):
            depth = rng.randint(0, 2)
            marker = rng.choice(["-", "*", "1."])
            lines.append("  " * depth * 2 + f"{marker} " + random_inline(rng, words))
        return "\n".join(lines)
    if kind == "code":
        language = rng.choice(["python", "js", ""])
        body = "\n".join(
            " " * rng.choice([0, 4]) + random_words(rng, words, rng.randint(1, 10)) for _ in range(rng.randint(1, 120))
        )
        return f"```{language}\n{body}\n```"
    if kind == "quote":
        return "> " + random_inline(rng, words)
    if kind == "table":
        rows = [" | ".join(random_words(rng, words, 1) for _ in range(3)) for _ in range(rng.randint(2, 6))]
        return "\n".join([f"| {rows[0]} |", "|---|---|---|", *(f"| {row} |" for row in rows[1:])])
    if kind == "long":
        return random_words(rng, words, rng.randint(200, 900))
    return random_inline(rng, words)


@pytest.mark.parametrize("seed", range(80))
def test_generated_replies_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    words: list[str] = []
    source = "\n\n".join(random_block(rng, words) for _ in range(rng.randint(1, 25)))
    limit = rng.choice([40, 120, 500, 1500, 4096])

    rendered = render_markdown(source)
    parts = split_for_telegram(source, limit)
    assert parts, source
    for part in parts:
        assert_valid(part, limit)
    # Only whitespace is dropped at cuts, and every generated word is there in order.
    assert squash("".join(part.text for part in parts)) == squash(rendered.text)
    assert_in_order(words, "".join(part.text for part in parts))
    if utf16_len(rendered.text) <= limit:
        assert parts == [rendered]
    # A code block is only cut when it does not fit (the margin leaves room for a list marker)...
    pieces = [entity_text(part, pre) for part in parts for pre in entities_of(part, "pre")]
    for pre in entities_of(rendered, "pre"):
        block = entity_text(rendered, pre)
        if utf16_len(block) <= limit - 8:
            assert block in pieces
    # ...and its pieces keep the language.
    languages = {entity.get("language") for part in parts for entity in entities_of(part, "pre")}
    assert languages <= {"python", "js", None}

    plain = plain_text_parts(source, limit)
    assert all(0 < utf16_len(part) <= limit and part.strip() for part in plain)
    assert squash("".join(plain)) == squash(source)


# Plain characters (some Unicode spaces and separators among them), and what can make a line Markdown.
_PLAIN = list("abcXYZ09 .,:;!?()'\"-+=/@$%^{}é😀\xa0\u2028\x0b\x0c")
_PLAIN += ["amp;", "eacute;"]  # with a "&" before them, entities
_MARKUP = ["\\", "`", "*", "_", "[", "]", "<", ">", "#", "|", "~", "&", "\n", "\t", "1. ", "- ", "    "]
_PLAIN_ALPHABET = st.sampled_from(_PLAIN + _MARKUP)


@settings(max_examples=600, deadline=None)
@given(st.lists(_PLAIN_ALPHABET, max_size=30).map("".join))
@example("Tea &amp; cake")
@example("Tea  ")
@example("1. tea")
def test_a_line_taken_as_plain_text_renders_as_the_parser_renders_it(text: str) -> None:
    # The shortcut for text with nothing that could be Markdown must never differ from parsing it.
    assert _render(text) == _parsed(text)


def test_a_plain_reply_skips_the_parser_and_markdown_does_not() -> None:
    assert _render("The garden is fine, thanks for asking! (3)") == ("The garden is fine, thanks for asking! (3)", [])
    text, spans = _render("The garden is *fine*")
    assert text == "The garden is fine" and [span.type for span in spans] == ["italic"]

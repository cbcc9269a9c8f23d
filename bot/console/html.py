"""The console's HTML: the page layout, escaping, forms that carry the CSRF token, and SVG bars.

Pages are plain strings put together here; every value from memory, a chat or a file goes through
`esc`. No inline script or style: the Content-Security-Policy the console sends allows only its own
files, so bars are SVG shapes sized by attributes."""

from __future__ import annotations

from html import escape
from string import Template

from bot.console.auth import Viewer

PREFIX = "/console"

_LAYOUT = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title · console</title>
<link rel="stylesheet" href="$prefix/static/console.css">
</head><body>
<header><nav>$nav</nav></header>
<main><h1>$title</h1>
$body
</main>
$scripts
</body></html>
""")

# (path, label, owner only)
_PAGES = (
    ("memory", "Memory", False),
    ("long-term", "MEMORY.md", False),
    ("notes", "Daily notes", False),
    ("why", "Why this reply", False),
    ("graph", "Graph", True),
    ("settings", "Settings", True),
    ("health", "Health", True),
)


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def page(title: str, body: str, viewer: Viewer | None, csrf: str = "", scripts: tuple[str, ...] = ()) -> str:
    nav = ""
    if viewer is not None:
        links = [
            f'<a href="{PREFIX}/{path}">{label}</a>'
            for path, label, owner_only in _PAGES
            if viewer.owner or not owner_only
        ]
        links.append(form("logout", "", csrf, "Log out", css="inline"))
        nav = " ".join(links)
    tags = "\n".join(f'<script src="{PREFIX}/static/{esc(name)}"></script>' for name in scripts)
    return _LAYOUT.substitute(title=esc(title), body=body, nav=nav, prefix=PREFIX, scripts=tags)


def form(action: str, fields: str, csrf: str, button: str, css: str = "", method: str = "post") -> str:
    """A form posting to `/console/{action}` with the session's CSRF token."""
    token = f'<input type="hidden" name="csrf" value="{esc(csrf)}">' if method == "post" else ""
    return (
        f'<form method="{method}" action="{PREFIX}/{action}" class="{esc(css)}">{token}{fields}'
        f'<button type="submit">{esc(button)}</button></form>'
    )


def hidden(name: str, value: object) -> str:
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def bar(fraction: float, label: str = "", width: int = 200) -> str:
    """A horizontal bar filled to `fraction` (0..1; over 1 drawn full and marked over)."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    over = " over" if fraction > 1 else ""
    title = f"<title>{esc(label)}</title>" if label else ""
    return (
        f'<svg class="bar{over}" viewBox="0 0 {width} 10" width="{width}" height="10" role="img" '
        f'aria-label="{esc(label)}">{title}<rect class="track" width="{width}" height="10"/>'
        f'<rect class="fill" width="{filled}" height="10"/></svg>'
    )


def stacked_bar(parts: list[tuple[str, int]], whole: int, width: int = 600) -> str:
    """One bar for a whole (the context window's threshold), each part a segment of its share of it, with a
    legend; the segments' colours come from the stylesheet (`segment-0` ...)."""
    whole = max(whole, sum(tokens for _, tokens in parts), 1)
    segments, legend, x = [], [], 0.0
    for number, (label, tokens) in enumerate(parts):
        if tokens <= 0:
            continue
        part_width = width * tokens / whole
        segments.append(
            f'<rect class="segment-{number % 8}" x="{x:.1f}" width="{part_width:.1f}" height="16">'
            f"<title>{esc(label)}: {tokens:,} tokens</title></rect>"
        )
        legend.append(f'<li><span class="swatch segment-{number % 8}"></span>{esc(label)} {tokens:,}</li>')
        x += part_width
    return (
        f'<svg class="stacked" viewBox="0 0 {width} 16" width="{width}" height="16" role="img" '
        f'aria-label="each part of the prompt against the window"><rect class="track" width="{width}" height="16"/>'
        f'{"".join(segments)}</svg><ul class="legend">{"".join(legend)}</ul>'
    )


def table(headers: list[str], rows: list[list[str]], css: str = "") -> str:
    """A table; cells are HTML already (escape what they hold)."""
    head = "".join(f"<th>{esc(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table class="{esc(css)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def message(text: str, kind: str = "note") -> str:
    return f'<p class="{esc(kind)}" role="status">{esc(text)}</p>'

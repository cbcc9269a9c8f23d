"""What reading a large page costs `web_fetch`: the CPU of `to_markdown` (readability, then markdownify) on
pages of the size `web.maxDownloadBytes` lets in, converted as far as `web.maxResultChars` of Markdown can be
shown (as the tool does) and converted whole.

The pages are made here, in the shapes that cost most: an encyclopedia article (links, footnotes, a long
table, a large inline script), a page that is one long table, and a long plain article. The work runs in a
worker thread in the bot, but it holds the interpreter most of the time: every chat waits a little while it
goes on. Figures: the median of `--runs` runs, in seconds, and the ratio of whole to bounded.

Run: `.venv/bin/python -m bench.web_fetch_conversion [--runs 3] [--max-chars 20000] [--json]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass

from bot.tools.web_fetch import FetchedPage, to_markdown

PARAGRAPH = (
    '<p>The <a href="/wiki/Otter" title="Otter" class="mw-link">otter</a> is a <b>semi-aquatic</b> mammal'
    '<sup id="cite_ref-1" class="reference"><a href="#cite_note-1">[1]</a></sup> found along rivers.</p>\n'
)
ROW = (
    '<tr><td><a href="/wiki/X" title="X">Lutra lutra</a></td><td class="num">12,345</td>'
    '<td><span class="flag"><img src="x.png" alt=""/></span> Europe</td></tr>\n'
)
PLAIN = "<p>" + "Lorem ipsum dolor sit amet. " * 40 + "</p>\n"


@dataclass(frozen=True)
class Row:
    page: str
    bytes: int
    bounded_s: float
    whole_s: float


def pages() -> dict[str, bytes]:
    script = "<script>" + "var a = 1;" * 20_000 + "</script>"
    article = (
        f"<html><head><title>Otters</title>{script}</head><body><div id='content'><h1>Otters</h1>"
        f"{PARAGRAPH * 2500}<table class='wikitable'>{ROW * 3000}</table>{PARAGRAPH * 500}</div></body></html>"
    )
    table = f"<html><body><table>{ROW * 9000}</table></body></html>"
    plain = f"<html><body><article>{PLAIN * 1700}</article></body></html>"
    return {"encyclopedia article": article.encode(), "one long table": table.encode(), "plain article": plain.encode()}


def seconds(body: bytes, max_chars: int, runs: int) -> float:
    page = FetchedPage("https://example.org/page", "text/html", "utf-8", body, False)
    timings = []
    for _ in range(runs):
        started = time.process_time()
        to_markdown(page, max_chars)
        timings.append(time.process_time() - started)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-chars", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    rows = [
        Row(name, len(body), seconds(body, arguments.max_chars, arguments.runs), seconds(body, 10**12, arguments.runs))
        for name, body in pages().items()
    ]
    if arguments.json:
        print(json.dumps([asdict(row) for row in rows], indent=1))
        return
    print(f"CPU seconds of to_markdown, median of {arguments.runs}, web.maxResultChars {arguments.max_chars}")
    print(f"{'page':<22} {'bytes':>10} {'bounded':>9} {'whole':>9} {'whole/bounded':>14}")
    for row in rows:
        ratio = row.whole_s / row.bounded_s if row.bounded_s else float("inf")
        print(f"{row.page:<22} {row.bytes:>10,} {row.bounded_s:>9.2f} {row.whole_s:>9.2f} {ratio:>14.1f}")


if __name__ == "__main__":
    main()

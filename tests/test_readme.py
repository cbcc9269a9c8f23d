"""The README stays true and short: its commands are the ones CI runs, every command line is listed, and
the links of the README and docs/ lead somewhere. (Every configuration key is documented in
docs/configuration.md: tests/test_settings_docs.py holds its tables to the settings model.)"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bot.__main__ import _parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
# The README is what a newcomer reads first, on a screen or two; the reference is in docs/.
README_MAX_LINES = 200


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.DOTALL)
    setup_and_run, setup_and_test = commands[0], commands[1]
    assert setup_and_run.endswith("python -m bot run")
    assert setup_and_test in (ROOT / ".ci" / "run").read_text()


def test_the_readme_fits_a_newcomer_and_points_to_the_reference() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES
    for page in ("configuration", "memory", "architecture", "operations", "reliability"):
        assert f"(docs/{page}.md)" in README, page
    assert "(bench/README.md)" in README


def test_the_readme_lists_every_command_line() -> None:
    commands = _parser()._subparsers
    assert commands is not None
    [choices] = [action.choices for action in commands._group_actions if isinstance(action, argparse._SubParsersAction)]
    for name in choices:
        assert f"`python -m bot {name}" in README, name


def test_no_page_has_unfinished_parts() -> None:
    for page in PAGES:
        assert not re.search(r"[A-Z_]+_PLACEHOLDER|TODO|TBD|VENV_SIZE|EXTRAS_SIZE", page.read_text()), page


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.M)
    }


def test_every_link_between_the_pages_leads_to_a_heading_that_exists() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            file, _, anchor = target.partition("#")
            destination = (page.parent / file) if file else page
            if not destination.exists():
                # The index of docs/ may name a page before it is written.
                if page.name == "README.md" and page.parent.name == "docs":
                    continue
                broken.append(f"{page.name}: {target}")
            elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
                broken.append(f"{page.name}: {target}")
    assert broken == []

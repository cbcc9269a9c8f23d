"""`SkillLibrary`: the skills in `workspace/skills/`, read from the files on every use.

A skill is a folder with a `SKILL.md`: front matter between `---` lines with `name:` and
`description:`, then the instructions in Markdown; other files beside it (scripts, templates,
references) are listed for the model, which reads them with `read_file`. Without front matter the
folder's name is the name and the first paragraph the description. Files are re-read when they
change (one `stat` per skill per message), so a hand edit applies to the next message.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from bot.storage.files import BYTE_ORDER_MARK, FileSignature, file_signature

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
# A skill's name: what `/skill NAME` and `load_skill` take, and the tag its procedural memory items carry.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_OPENING = re.compile(r"\A---[ \t]*\n")
# YAML's markers of a value on the lines that follow: `|` keeps line breaks, `>` folds them (a sign may follow).
_BLOCK_INDICATOR = re.compile(r"[|>][+-]?")
# Files listed beside a skill: enough to show what is there, not a whole tree.
MAX_LISTED_FILES = 30
CATALOG_HEADER = "# Skills"
CATALOG_INTRO = (
    "Skills are instructions for kinds of tasks. When the task fits one, call load_skill with its name "
    "before you start, and follow it."
)


@dataclass(frozen=True)
class Skill:
    """One skill as its files are now."""

    name: str
    description: str
    instructions: str
    folder: Path
    files: tuple[str, ...]


def parse_skill(folder: Path, text: str) -> Skill:
    """A skill from its SKILL.md text (the folder gives the name when the front matter does not). What a
    hand edit gets wrong (front matter never closed, a name that is no skill name) is logged, and the skill
    is read as well as it can be."""
    text = text.removeprefix(BYTE_ORDER_MARK)
    fields: dict[str, str] = {}
    body = text
    match = _FRONT_MATTER.match(text)
    if match is not None:
        body = text[match.end() :]
        fields = _front_matter_fields(match.group(1))
    elif _OPENING.match(text):
        log.warning(
            "[Skills] %s/%s: the front matter has no closing --- line; read as instructions", folder, SKILL_FILE
        )
    name = fields.get("name") or folder.name
    if not _NAME.fullmatch(name):
        log.warning(
            "[Skills] %s/%s: %r is no skill name (letters, digits, '.', '_', '-'); named %r after its folder",
            folder, SKILL_FILE, name, folder.name,
        )  # fmt: skip
        name = folder.name
    description = fields.get("description") or _first_paragraph(body)
    return Skill(name, " ".join(description.split()), body.strip(), folder, _files_beside(folder))


def _front_matter_fields(block: str) -> dict[str, str]:
    """`key: value` lines; a value may go on over indented lines (YAML's `description: >` or `|` and a plain
    value wrapped), which are joined with spaces (a description is one line in the catalog)."""
    fields: dict[str, str] = {}
    key: str | None = None
    for line in block.splitlines():
        if line.startswith((" ", "\t")) and key is not None:
            fields[key] = f"{fields[key]} {line.strip()}".strip()
            continue
        name, sep, value = line.partition(":")
        key = name.strip().lower() if sep and name.strip() else None
        if key is not None:
            value = value.strip()
            fields[key] = "" if _BLOCK_INDICATOR.fullmatch(value) else value
    return {name: value.strip("\"'") for name, value in fields.items()}


def _first_paragraph(body: str) -> str:
    for block in body.split("\n\n"):
        text = " ".join(line for line in block.strip().splitlines() if not line.startswith("#"))
        if text.strip():
            return text.strip()
    return ""


def _files_beside(folder: Path) -> tuple[str, ...]:
    found: list[str] = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != SKILL_FILE and not path.name.startswith("."):
            found.append(path.relative_to(folder).as_posix())
            if len(found) >= MAX_LISTED_FILES:
                break
    return tuple(found)


def _skill_text(path: Path) -> str:
    """SKILL.md's text; one saved in another encoding than UTF-8 is read with its odd bytes replaced, and said."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        log.warning("[Skills] %s: line %d holds bytes that are not UTF-8; read with them replaced", path, line)
        text = data.decode("utf-8", "replace")
    return text.replace("\r\n", "\n")


class SkillLibrary:
    """The skills of one workspace, kept in step with their files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[Path, tuple[FileSignature, Skill]] = {}
        # The names found by the last look at the folder (the tool is offered only when there are some).
        self.known: tuple[str, ...] = ()
        # The last scan: what it found, and the signature of every path it looked at (None: absent).
        self._last: tuple[list[Skill], dict[Path, FileSignature | None]] | None = None

    async def skills(self) -> list[Skill]:
        """Every readable skill, by name; a SKILL.md that cannot be read is skipped with a log line."""
        found = self._unchanged()
        if found is None:
            found = await asyncio.to_thread(self._scan)
        self.known = tuple(skill.name for skill in found)
        return found

    def _unchanged(self) -> list[Skill] | None:
        """The last scan's skills when nothing it looked at changed since, else None. A `stat` of the
        skills folder, of each folder in it and of each SKILL.md (a skill added, removed or edited changes
        one of them): cheaper on the event loop than the hand-off of a scan to a thread, every message."""
        if self._last is None:
            return None
        found, signatures = self._last
        if any(file_signature(path) != signature for path, signature in signatures.items()):
            return None
        return list(found)

    async def get(self, name: str) -> Skill | None:
        wanted = name.strip().lower()
        return next((skill for skill in await self.skills() if skill.name.lower() == wanted), None)

    def _scan(self) -> list[Skill]:
        found: dict[str, Skill] = {}
        seen: set[Path] = set()
        # Taken before the folders are read: a change while they are is seen by the next look.
        signatures: dict[Path, FileSignature | None] = {self.root: file_signature(self.root)}
        unreadable = False
        try:
            folders = sorted(path for path in self.root.iterdir() if path.is_dir())
        except FileNotFoundError:
            folders = []
        for folder in folders:
            skill_file = folder / SKILL_FILE
            signatures[folder] = file_signature(folder)
            signature = signatures[skill_file] = file_signature(skill_file)
            if signature is None:
                continue
            seen.add(skill_file)
            cached = self._cache.get(skill_file)
            if cached is None or cached[0] != signature:
                try:
                    skill = parse_skill(folder, _skill_text(skill_file))
                except OSError as error:
                    log.warning("[Skills] Could not read %s: %s", skill_file, error)
                    unreadable = True  # tried again next time: a permission fixed changes no signature
                    continue
                cached = (signature, skill)
                self._cache[skill_file] = cached
            skill = cached[1]
            if skill.name.lower() in found:
                log.warning("[Skills] %s repeats the name %r; the first one is kept", skill_file, skill.name)
                continue
            found[skill.name.lower()] = skill
        for stale in set(self._cache) - seen:
            del self._cache[stale]
        self._last = None if unreadable else (list(found.values()), signatures)
        return list(found.values())


def render_catalog(skills: list[Skill], budget_chars: int, description_chars: int) -> str:
    """`# Skills`: one line per skill, within `budget_chars`; what does not fit is named as left out."""
    if not skills or budget_chars <= 0:
        return ""
    lines = [CATALOG_HEADER, CATALOG_INTRO]
    used = sum(len(line) + 1 for line in lines)
    left_out = 0
    for skill in skills:
        description = skill.description
        if len(description) > description_chars:
            description = description[: description_chars - 1].rstrip() + "…"
        line = f"- {skill.name}: {description}" if description else f"- {skill.name}"
        if left_out or used + len(line) + 1 > budget_chars:
            left_out += 1
            continue
        lines.append(line)
        used += len(line) + 1
    if left_out:
        lines.append(f"- … {left_out} more skills not listed (skills.promptBudgetChars); load_skill lists them all")
    return "\n".join(lines)


def render_instructions(skill: Skill, max_chars: int) -> str:
    """A skill's instructions as the model gets them: heading, folder, files beside it, the text."""
    text = skill.instructions
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[… {len(text) - max_chars} more characters cut: skills.maxInstructionsChars]"
    head = [f"## Active skill: {skill.name}", f"Folder: skills/{skill.folder.name}/"]
    if skill.files:
        head.append("Files beside it (read them with read_file): " + ", ".join(skill.files))
    return "\n".join(head) + "\n\n" + text

"""Memory V2's plain data: `MemoryItem` (one JSONL line), `MemoryQuery`, `MemoryPack`, `TurnMemoryEvent`.

The item is stored as docs/memory.md describes (`memory/items/**.jsonl`, camelCase keys); the optional
fields (`key`, `supersededBy`, `pinned`, ...) are documented on the class. Unknown keys
a person adds by hand are kept on rewrite.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import Field, ValidationInfo, field_validator, model_validator

from bot.domain.model import CamelModel, utc_now
from bot.domain.text import fingerprint_of


class MemoryLayer(StrEnum):
    """What kind of knowledge an item is: a trace of a turn, a durable fact, or how to do something."""

    EPISODIC = "EPISODIC"
    SEMANTIC = "SEMANTIC"
    PROCEDURAL = "PROCEDURAL"


# Who said an item: the name before its first colon ("Ann: …", "[D1:3] Ann: …", "User: … | Assistant: …"),
# as group chats and imported conversations write them.
_SPEAKER = re.compile(r"^(?:\[[^\]]{1,40}\]\s*)?([A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2}):\s")


def speaker_of(content: str) -> str | None:
    """The name an item's content starts with as its speaker, if any."""
    found = _SPEAKER.match(content)
    return found[1] if found else None


def new_memory_id() -> str:
    return "m" + uuid.uuid4().hex[:11]


class MemoryItem(CamelModel):
    """One remembered thing, one line of a `memory/items/**.jsonl` file.

    `key` names the slot a fact fills ("my name", "lives in"): a newer fact with the same key and
    different content supersedes the older one, which stays in the file with `supersededBy` set and is
    no longer retrieved. `pinned` items go into every prompt; `shared` ones, of the owner's memory, into
    every chat's (see `bot.memory.audience`). `lastAccessedAt` and `decayedAt` drive the
    salience decay after `decayDays` without use. `searchKeys` are words an exchange is found by
    besides its own (the facts the model drew from it: `bot.memory.search_keys`), never shown.
    """

    id: str = Field(default_factory=new_memory_id)
    layer: MemoryLayer
    type: str
    content: str
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    confidence: float = Field(0.5, ge=0, le=1)
    salience: float = Field(0.5, ge=0, le=1)
    tags: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    fingerprint: str = ""
    source: str = ""
    key: str | None = None
    superseded_by: str | None = None
    pinned: bool = False
    # The owner shared it with every chat (`/memory share ID`); an item without it is its memory's own
    # (written only when true, so the lines of unshared items stay as they were).
    shared: bool = Field(False, exclude_if=lambda shared: not shared)
    last_accessed_at: datetime | None = None
    decayed_at: datetime | None = None
    # Made from the words of `content` as it was written (the item's `fingerprint`): a hand edit of the content
    # drops them (see `_fingerprinted`). Written only when there are some.
    search_keys: list[str] = Field(default_factory=list, exclude_if=lambda keys: not keys)

    @field_validator("created_at", "updated_at", "last_accessed_at", "decayed_at", mode="after")
    @classmethod
    def _zoned(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        """A time written without a zone (as a person typing JSONL does) is read in the bot's time zone,
        which the store passes as validation context (`{"zone": tzinfo}`); UTC without one.

        Years 1 and 9999 are refused (the line is skipped as an unreadable date): converting such a
        time to another zone, as the day files and the pack's dates do, overflows the calendar.
        """
        if value is None:
            return value
        if not datetime.min.year < value.year < datetime.max.year:
            raise ValueError(f"time out of range: {value.isoformat()}")
        if value.tzinfo is not None:
            return value
        zone = (info.context or {}).get("zone", UTC)
        return value.replace(tzinfo=zone)

    @model_validator(mode="after")
    def _fingerprinted(self) -> MemoryItem:
        """A hand-written item without a fingerprint gets its content's: an empty one would make every
        such item look like a duplicate of the others.

        Search keys describe the words they were made from, whose fingerprint the item keeps: content
        edited by hand since no longer has it, and the keys go (the next rewrite of the item leaves them
        out of its line too), so an edit never leaves the item found by what it no longer says.
        """
        if not self.fingerprint:
            self.fingerprint = fingerprint_of(self.content)
        elif self.search_keys and self.fingerprint != fingerprint_of(self.content):
            self.search_keys = []
        return self

    @property
    def active(self) -> bool:
        """Whether retrieval may return it (superseded items are kept only for history)."""
        return self.superseded_by is None

    @property
    def speaker(self) -> str | None:
        return speaker_of(self.content)

    @property
    def last_used_at(self) -> datetime:
        return max(self.updated_at, self.last_accessed_at or self.updated_at)


@dataclass(frozen=True)
class TurnMemoryEvent:
    """A finished exchange, as the write stage (50) hands it to memory."""

    session_id: str
    user_text: str
    assistant_text: str
    timestamp: datetime
    user_message_id: str | None = None
    assistant_message_id: str | None = None
    tool_names: tuple[str, ...] = ()
    # The memory it is written to when not the session's own (a person's, under `memory.scope: user`).
    memory_key: str | None = None
    # Who said it, in a group: every fact drawn from it is recorded as "Name: ..." under a key of that
    # person's, so one member's "I live in Lyon" never becomes (or replaces) another's.
    speaker: str | None = None
    # The skill active when it was said: procedures learnt from it are tagged with the skill's name, so
    # retrieval favours them while the skill is active again.
    skill: str | None = None


@dataclass(frozen=True)
class LiveConversation:
    """The message ids of a chat's live conversation, as a set and in order: both are the same objects
    for as long as the conversation only grows (`Incremental`), and grow with it."""

    ids: AbstractSet[str] = frozenset()
    in_order: Sequence[str] = ()


@dataclass(frozen=True)
class MemoryQuery:
    """What to retrieve for one prompt: the message, top-k per layer and the prompt budgets."""

    text: str
    session_id: str
    now: datetime
    working_top_k: int = 6
    # Only exchanges this recent form the working set (older ones compete on relevance like the rest).
    working_days: int = 7
    episodic_top_k: int = 8
    semantic_top_k: int = 6
    procedural_top_k: int = 4
    soft_budget_tokens: int = 1800
    max_budget_tokens: int = 3500
    active_skill: str | None = None
    # The live conversation, whose messages the model is sent anyway: items referring to them are not
    # worth repeating in the prompt.
    live: LiveConversation = field(default_factory=LiveConversation)


@dataclass(frozen=True)
class ScoredItem:
    """An item with the score retrieval gave it (0..1) and the parts that made it up."""

    item: MemoryItem
    score: float
    section: str
    parts: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PackDiagnostics:
    """What the pack saw and kept, for the `[Context]` log line and `/status`."""

    candidates: int = 0
    selected: int = 0
    tokens: int = 0
    dropped_for_budget: int = 0
    top_scores: tuple[float, ...] = ()
    embeddings_used: bool = False
    # Lexical because the embedder was making another message's vector while more replies waited.
    embedder_busy: bool = False
    # Wall time of the message's vector, the scoring and the rendering.
    elapsed_ms: float = 0.0
    # The first candidates left out for the budget, best first: (item id, score, section).
    missed: tuple[tuple[str, float, str], ...] = ()

    def describe(self) -> str:
        scores = ", ".join(f"{score:.2f}" for score in self.top_scores) or "-"
        vectors = "hybrid" if self.embeddings_used else "lexical, embedder busy" if self.embedder_busy else "lexical"
        return (
            f"{self.candidates} candidates, {self.selected} selected, ~{self.tokens} tokens, "
            f"{self.dropped_for_budget} over budget, top scores {scores} ({vectors}, {self.elapsed_ms:.0f} ms)"
        )


@dataclass(frozen=True)
class MemoryPack:
    """The structured memory chosen for one prompt, and its rendering under the budgets."""

    items: tuple[ScoredItem, ...] = ()
    rendered: str = ""
    diagnostics: PackDiagnostics = PackDiagnostics()

    @property
    def empty(self) -> bool:
        return not self.items

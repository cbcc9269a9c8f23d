"""Rule-based extraction: what of a finished turn is worth remembering beyond the turn itself.

SEMANTIC candidates are durable facts, preferences, constraints and decisions the user states
("my name is", "I prefer", "remember that", "we decided", "never do X"). Weaker personal facts
("I live in", "I work at", "I use") start EPISODIC with lower confidence and are promoted once
repeated. PROCEDURAL candidates are execution knowledge: a fix that worked, failures, and with
`codeAwareExtractionEnabled` code blocks, commands, file paths and error messages. The rules never
call anything and never fail, so they are also the fallback of the optional LLM extractor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bot.domain.memory import MemoryLayer, TurnMemoryEvent

# Confidence and salience by kind: explicit statements start above the promotion threshold.
EXPLICIT_CONFIDENCE = 0.8
TENTATIVE_CONFIDENCE = 0.6
PROCEDURAL_CONFIDENCE = 0.7
IDENTITY_SALIENCE = 0.9
CONSTRAINT_SALIENCE = 0.9
FACT_SALIENCE = 0.7
PROCEDURAL_SALIENCE = 0.6
CODE_SNIPPET_LIMIT = 600
FIX_TEXT_LIMIT = 400
SENTENCE_LIMIT = 300


@dataclass(frozen=True)
class MemoryCandidate:
    """Something a turn suggests remembering, before dedup decides whether it is new."""

    layer: MemoryLayer
    type: str
    content: str
    confidence: float
    salience: float
    key: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    # Words it is found by besides its own (`MemoryItem.search_keys`).
    search_keys: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    layer: MemoryLayer
    type: str
    confidence: float
    salience: float
    # A slot name for facts a newer statement replaces; may use the match's groups.
    key: str | None = None


def _rule(
    regex: str, layer: MemoryLayer, type_: str, confidence: float, salience: float, key: str | None = None
) -> _Rule:
    return _Rule(re.compile(regex, re.IGNORECASE), layer, type_, confidence, salience, key)


_S, _E = MemoryLayer.SEMANTIC, MemoryLayer.EPISODIC
_SENTENCE_RULES = (
    _rule(r"\bmy name is\s+\w|\bcall me\s+(?-i:[A-Z])", _S, "identity", EXPLICIT_CONFIDENCE, IDENTITY_SALIENCE, "name"),
    _rule(r"\bremember(?: that|:)\s*\S", _S, "fact", EXPLICIT_CONFIDENCE, FACT_SALIENCE),
    _rule(r"\b(?:never|don't ever|do not ever|always)\b", _S, "constraint", EXPLICIT_CONFIDENCE, CONSTRAINT_SALIENCE),
    _rule(r"\b(?:we|i)(?: have)? decided\b|\blet's go with\b|\bdecision:", _S, "decision", 0.8, FACT_SALIENCE),
    _rule(r"\bi (?:prefer|like|love|hate|dislike|don't like|would rather|'d rather)\b", _S, "preference", 0.8, 0.7),
    _rule(r"\bmy ((?:\w+ ){0,2}\w+) (?:is|are)\s+\S", _S, "fact", EXPLICIT_CONFIDENCE, FACT_SALIENCE, "my {0}"),
    _rule(r"\bi(?: am|'m) (?:living|based) in\b|\bi live in\b", _E, "fact", TENTATIVE_CONFIDENCE, 0.6, "lives in"),
    _rule(r"\bi work (?:at|for|as)\b", _E, "fact", TENTATIVE_CONFIDENCE, 0.6, "works at"),
    _rule(r"\bi(?: usually)? use\b|\bi have an?\b|\bi(?: am|'m) an?\b", _E, "fact", TENTATIVE_CONFIDENCE, 0.5),
)
# A request to forget states nothing to remember ("forget that I like jazz" is not a preference).
_FORGET_REQUEST = re.compile(r"\b(?:forget|don't remember|do not remember|stop remembering)\b", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_CODE_BLOCK = re.compile(r"```([\w+-]*)\n(.*?)```", re.DOTALL)
_INLINE_COMMAND = re.compile(
    r"(?:^|\n)\s*\$ (.+)|`((?:sudo |pip |git |docker |npm |python3? |make |kubectl |cd )[^`\n]+)`"
)
_FILE_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?(?:/[\w.-]+)+/?[\w-]+\.\w{1,5}\b|\b[\w-]+(?:/[\w.-]+)+\.\w{1,5}\b")
_ERROR_LINE = re.compile(
    r"^.*\b(?:\w+Error|\w+Exception|Traceback|error:|ERROR|failed|fatal:|command not found|No such file).*$",
    re.MULTILINE,
)
_WORKED = re.compile(r"\b(?:that|it|this) (?:worked|works|fixed it|did it)\b|\bfixed\b|\bsolved\b", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_SPLIT.split(text) if len(part.strip()) > 3]


def _clean_fact(sentence: str) -> str:
    return re.sub(r"^(?:please\s+)?remember(?: that|:)\s*", "", sentence, flags=re.IGNORECASE).strip()[:SENTENCE_LIMIT]


def _prose(text: str) -> str:
    return _CODE_BLOCK.sub(" ", text)


class RuleBasedExtractor:
    """Finds memory candidates in a turn with regular expressions."""

    def extract(
        self, event: TurnMemoryEvent, *, code_aware: bool, previous_assistant_text: str = ""
    ) -> list[MemoryCandidate]:
        candidates = self._statements(event.user_text)
        candidates += self._procedures(event, code_aware, previous_assistant_text)
        unique: dict[tuple[MemoryLayer, str], MemoryCandidate] = {}
        for candidate in candidates:
            unique.setdefault((candidate.layer, candidate.content.lower()), candidate)
        return list(unique.values())

    def _statements(self, user_text: str) -> list[MemoryCandidate]:
        found = []
        for sentence in _sentences(_prose(user_text)):
            if sentence.endswith("?") or _FORGET_REQUEST.search(sentence):
                continue  # a question or a request to forget states nothing
            for rule in _SENTENCE_RULES:
                match = rule.pattern.search(sentence)
                if match is None:
                    continue
                key = rule.key.format(*(g.lower() for g in match.groups())) if rule.key else None
                content = _clean_fact(sentence)
                found.append(MemoryCandidate(rule.layer, rule.type, content, rule.confidence, rule.salience, key))
                break
        return found

    def _procedures(
        self, event: TurnMemoryEvent, code_aware: bool, previous_assistant_text: str
    ) -> list[MemoryCandidate]:
        found = []
        p = MemoryLayer.PROCEDURAL
        errors = [line.strip()[:SENTENCE_LIMIT] for line in _ERROR_LINE.findall(event.user_text)]
        if errors and (_CODE_BLOCK.search(event.assistant_text) or _INLINE_COMMAND.search(event.assistant_text)):
            fix = event.assistant_text.strip()[:FIX_TEXT_LIMIT]
            found.append(
                MemoryCandidate(p, "failure", f"Failure: {errors[0]}\nSuggested fix: {fix}", 0.5, PROCEDURAL_SALIENCE)
            )
        if previous_assistant_text and _WORKED.search(event.user_text):
            worked = previous_assistant_text.strip()[:FIX_TEXT_LIMIT]
            found.append(MemoryCandidate(p, "fix", f"Worked: {worked}", 0.85, 0.8, tags=("confirmed",)))
        if not code_aware:
            return found
        for text in (event.user_text, event.assistant_text):
            for language, body in _CODE_BLOCK.findall(text):
                snippet = f"```{language}\n{body.strip()[:CODE_SNIPPET_LIMIT]}\n```"
                tags = (language.lower(),) if language else ()
                found.append(MemoryCandidate(p, "code", snippet, PROCEDURAL_CONFIDENCE, 0.5, tags=tags))
            commands = [(a or b).strip() for a, b in _INLINE_COMMAND.findall(text)]
            for command in commands[:3]:
                found.append(MemoryCandidate(p, "command", f"$ {command}", PROCEDURAL_CONFIDENCE, 0.5))
            paths = sorted(set(_FILE_PATH.findall(_prose(text))))
            if paths:
                found.append(MemoryCandidate(p, "paths", "Files: " + ", ".join(paths[:8]), 0.6, 0.4))
        for error in errors[:2]:
            found.append(MemoryCandidate(p, "error", f"Error seen: {error}", 0.6, 0.5))
        return found

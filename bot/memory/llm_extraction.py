"""`LlmMemoryExtractor`: optional (`memory.llmExtractionEnabled`) extraction of facts by one cheap model call.

The model must answer strict JSON matching `ExtractionReply`; anything else (an error, a timeout,
prose, a wrong field, keys that are not a short list of short words) returns None and the caller uses
the rules instead. Procedural knowledge stays with the rules, which see code and commands exactly.

The same call gives the exchange its search keys: the facts' sentences and the reply's optional `keys`
(what the things it names are, where its places are), so a later question in the facts' words finds the
exchange itself, whose own words the prompt then shows (`bot.memory.search_keys`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bot.domain.memory import MemoryLayer, TurnMemoryEvent
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.errors import LlmError
from bot.memory.extraction import FACT_SALIENCE, MemoryCandidate
from bot.memory.search_keys import unique_keys

log = logging.getLogger(__name__)

EXTRACTION_TIMEOUT_SECONDS = 15.0
# A fact is about 40 tokens of JSON, the list of keys up to about 60: a reply cut short is not JSON, and is refused.
EXTRACTION_MAX_TOKENS = 460
EXTRACTION_INSTRUCTIONS = (
    "You extract long-term memory from one chat exchange between a user and an assistant. "
    "Keep only durable facts about the user, their preferences, constraints (things never or always to do) "
    "and decisions; ignore small talk and anything only true for this moment. "
    'Answer with JSON only, no prose: {"items": [{"layer": "SEMANTIC" or "EPISODIC", '
    '"type": "identity" | "preference" | "constraint" | "decision" | "fact", "content": "one short sentence", '
    '"key": "slot name such as name or lives in, or null", "confidence": 0.0-1.0}], '
    '"keys": ["up to 12 short search words for what the exchange is about but does not say: what kind of '
    'thing each thing named is, what it is an instance of, the region and country of a place"]}. '
    "Use SEMANTIC for clearly stated lasting facts, EPISODIC for tentative ones. "
    '{"items": [], "keys": []} when nothing. '
    "The exchange's date is given first: write a relative date (yesterday, last Friday, next month) as the "
    "date it means on that day."
)
MAX_KEYS = 12
KEY_MAX_CHARS = 40
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")

SearchKey = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=KEY_MAX_CHARS)]


class ExtractedItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layer: Literal["SEMANTIC", "EPISODIC"]
    type: Literal["identity", "preference", "constraint", "decision", "fact"]
    content: str = Field(min_length=3, max_length=400)
    key: str | None = Field(None, max_length=60)
    confidence: float = Field(ge=0, le=1)


class ExtractionReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ExtractedItem] = Field(max_length=10)
    # Optional: a reply without it gives the exchange its facts' sentences as keys alone.
    keys: list[SearchKey] = Field(default_factory=list, max_length=MAX_KEYS)

    def search_keys(self) -> tuple[str, ...]:
        """The exchange's search keys: each fact's sentence, then each key, the same words once."""
        return tuple(unique_keys([entry.content.strip() for entry in self.items] + self.keys))


@dataclass(frozen=True)
class LlmExtraction:
    """What the model drew from an exchange: the facts to remember, and the words the exchange is found by."""

    candidates: list[MemoryCandidate]
    search_keys: tuple[str, ...]


class LlmMemoryExtractor:
    """Asks the model what of a turn is worth remembering."""

    def __init__(self, llm: LlmClient, model: str) -> None:
        self._llm = llm
        self._model = model

    async def extract(self, event: TurnMemoryEvent) -> LlmExtraction | None:
        # Relative dates are resolved against when the exchange was said, which may be long before now.
        said = f"Said on {event.timestamp:%A %d %B %Y}."
        exchange = f"{said}\n\nUser: {event.user_text}\n\nAssistant: {event.assistant_text}"
        request = ChatRequest(
            model=self._model,
            messages=[
                {"role": "system", "content": EXTRACTION_INSTRUCTIONS},
                {"role": "user", "content": exchange},
            ],
            temperature=0.0,
            max_tokens=EXTRACTION_MAX_TOKENS,
            timeout_seconds=EXTRACTION_TIMEOUT_SECONDS,
            max_retries=0,
            purpose="memory",
        )
        try:
            result = await self._llm.complete(request)
            return parse_reply(result.text)
        except (LlmError, ValueError) as error:
            log.warning("[Memory] LLM extraction failed, using the rules: %s", _reason(error)[:200])
            return None


def parse_reply(text: str) -> LlmExtraction:
    """The extraction the model's reply gives; ValueError (a `ValidationError` for JSON of the wrong shape) for
    any reply that is not exactly what `EXTRACTION_INSTRUCTIONS` asks for."""
    reply = ExtractionReply.model_validate(json.loads(_FENCE.sub("", text.strip())))
    candidates = [
        MemoryCandidate(
            layer=MemoryLayer(entry.layer),
            type=entry.type,
            content=entry.content.strip(),
            confidence=entry.confidence,
            salience=FACT_SALIENCE,
            key=entry.key.strip().lower() if entry.key else None,
        )
        for entry in reply.items
    ]
    return LlmExtraction(candidates, reply.search_keys())


def _reason(error: Exception) -> str:
    """What was wrong, in one line: for a reply that is JSON of the wrong shape, the first field at fault."""
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "reply"
        return f"{where}: {first['msg']}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__

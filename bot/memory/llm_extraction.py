"""`LlmMemoryExtractor`: optional (`memory.llmExtractionEnabled`) extraction of facts by one cheap model call.

The model must answer strict JSON matching `ExtractionReply`; anything else (an error, a timeout,
prose, a wrong field) returns None and the caller uses the rules instead. Procedural knowledge stays
with the rules, which see code and commands exactly.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.domain.memory import MemoryLayer, TurnMemoryEvent
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.errors import LlmError
from bot.memory.extraction import FACT_SALIENCE, MemoryCandidate

log = logging.getLogger(__name__)

EXTRACTION_TIMEOUT_SECONDS = 15.0
EXTRACTION_MAX_TOKENS = 400
EXTRACTION_INSTRUCTIONS = (
    "You extract long-term memory from one chat exchange between a user and an assistant. "
    "Keep only durable facts about the user, their preferences, constraints (things never or always to do) "
    "and decisions; ignore small talk and anything only true for this moment. "
    'Answer with JSON only, no prose: {"items": [{"layer": "SEMANTIC" or "EPISODIC", '
    '"type": "identity" | "preference" | "constraint" | "decision" | "fact", "content": "one short sentence", '
    '"key": "slot name such as name or lives in, or null", "confidence": 0.0-1.0}]}. '
    'Use SEMANTIC for clearly stated lasting facts, EPISODIC for tentative ones. {"items": []} when nothing. '
    "The exchange's date is given first: write a relative date (yesterday, last Friday, next month) as the "
    "date it means on that day."
)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


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


class LlmMemoryExtractor:
    """Asks the model what of a turn is worth remembering."""

    def __init__(self, llm: LlmClient, model: str) -> None:
        self._llm = llm
        self._model = model

    async def extract(self, event: TurnMemoryEvent) -> list[MemoryCandidate] | None:
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
            reply = ExtractionReply.model_validate(json.loads(_FENCE.sub("", result.text.strip())))
        except (LlmError, ValueError, ValidationError) as error:
            log.warning("[Memory] LLM extraction failed, using the rules: %s", str(error).splitlines()[0][:200])
            return None
        return [
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

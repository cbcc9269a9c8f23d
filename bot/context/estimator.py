"""`TokenEstimator`: how many tokens a text or a conversation costs, without downloading a tokenizer.

A characters-per-token ratio per model: 3.5 to start, a fair average for English prose and code on
current tokenizers that errs towards over-counting (the safe side for a budget). Every time a provider
reports the `prompt_tokens` of a request whose size we know, the model's ratio moves towards the
observed one by an exponential moving average, so the estimate follows the real tokenizer without
ever loading it. Nothing is downloaded; the ratio lives in memory and starts over on restart.

Where a model's tokenizer is on the machine already (`OfflineTokenizers`), counts are exact instead.

Images are counted as OpenAI bills them at `detail: high` (`image_tokens`): the image scaled to fit
2048x2048, then its shorter side to 768, costs 85 tokens plus 170 per 512-pixel tile, from the pixel
size the bot sent (a 1280x720 photo: 6 tiles, 1,105 tokens; an image sent as a file, by its header);
an image whose size is unknown counts `UNKNOWN_SIZE_IMAGE_TOKENS`, a 1024x1024 image's figure. Only
the images that still go to the model count so: an older one is sent as a one-line text stand-in and
counts as that line.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bot.context.tokenizer import Counter, OfflineTokenizers
from bot.domain.conversation import Incremental
from bot.domain.message import MediaRef, Message, Role
from bot.llm.wire import WireSize, image_parts, repeated_chars, wire_chars

log = logging.getLogger(__name__)

DEFAULT_CHARS_PER_TOKEN = 3.5
# Role, separators and framing the provider adds around every message.
MESSAGE_OVERHEAD_TOKENS = 4
# Weight of one observation in the moving average: small, so one odd request moves the ratio little.
CALIBRATION_SMOOTHING = 0.1
# Requests smaller than this are mostly framing; their ratio says little about the tokenizer.
MIN_CALIBRATION_TOKENS = 200
# A ratio outside these bounds is a measuring error (an image, a cached prompt), not a tokenizer.
MIN_CHARS_PER_TOKEN = 1.0
MAX_CHARS_PER_TOKEN = 6.0
# Exact counts of stored messages are remembered (messages do not change); bounded, then started over.
EXACT_CACHE_ENTRIES = 20_000
# OpenAI's image cost at `detail: high`: a fixed part and a part per 512-pixel tile of the scaled image.
IMAGE_BASE_TOKENS = 85
IMAGE_TILE_TOKENS = 170
IMAGE_TILE_PIXELS = 512
IMAGE_MAX_SIDE = 2048
IMAGE_SHORT_SIDE = 768
# An image whose pixel size is unknown counts as a 1024x1024 one (4 tiles).
UNKNOWN_SIZE_IMAGE_TOKENS = 765
# The characters of an image's text stand-in ("[Image sent earlier: you said of it: …]", at most this).
IMAGE_STAND_IN_CHARS = 200


def image_tokens(width: int | None, height: int | None) -> int:
    """Prompt tokens of one image of this pixel size, by OpenAI's tile formula (`detail: high`)."""
    if not width or not height:
        return UNKNOWN_SIZE_IMAGE_TOKENS
    scale = min(1.0, IMAGE_MAX_SIDE / max(width, height))
    scaled_w, scaled_h = width * scale, height * scale
    scale = min(1.0, IMAGE_SHORT_SIDE / min(scaled_w, scaled_h))
    tiles = math.ceil(scaled_w * scale / IMAGE_TILE_PIXELS) * math.ceil(scaled_h * scale / IMAGE_TILE_PIXELS)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


def _images(message: Message) -> list[MediaRef]:
    return [media for media in message.media or [] if media.kind == "image"]


class TokenEstimator:
    """Estimates token counts from character counts, calibrated per model by reported usage."""

    def __init__(
        self,
        chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
        *,
        tokenizers: OfflineTokenizers | None = None,
        exact: bool = True,
    ) -> None:
        self.chars_per_token = chars_per_token
        self._calibrated: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._tokenizers = tokenizers or (OfflineTokenizers() if exact else None)
        self._exact_cache: dict[tuple[str, str, int], int] = {}
        self._tallies = Incremental(_Tally, _tallied)
        # The registry hands out the same list while the tools stay the same (`ToolRegistry.schemas`): its
        # JSON is made once per list, as the client's body does, not per turn.
        self._schemas_seen: list[dict[str, Any]] | None = None
        self._schemas_text = ""
        self._schemas_size = WireSize.NONE

    def exact_counter(self, model: str | None) -> Counter | None:
        """The model's offline tokenizer, when there is one (see `OfflineTokenizers`)."""
        if model is None or self._tokenizers is None:
            return None
        return self._tokenizers.counter_for(model)

    def ratio_for(self, model: str | None) -> float:
        """Characters per token for `model` (the calibrated ratio once there is one)."""
        if model is None:
            return self.chars_per_token
        return self._calibrated.get(model, self.chars_per_token)

    def samples_for(self, model: str) -> int:
        return self._samples.get(model, 0)

    def text(self, text: str, model: str | None = None) -> int:
        counter = self.exact_counter(model)
        if counter is not None:
            return counter(text)
        return math.ceil(len(text) / self.ratio_for(model))

    def message(self, message: Message, model: str | None = None, *, images_sent: bool = True) -> int:
        """Tokens of one message: its text, tool calls and images (`images_sent`: as images, else as the
        one-line stand-in each becomes once it is no longer sent)."""
        images = _images(message)
        if images_sent:
            image_cost = sum(image_tokens(image.width, image.height) for image in images)
        else:
            image_cost = self.text("x" * IMAGE_STAND_IN_CHARS, model) * len(images)
        counter = self.exact_counter(model)
        if counter is None:
            return MESSAGE_OVERHEAD_TOKENS + math.ceil(message_chars(message) / self.ratio_for(model)) + image_cost
        assert model is not None
        key = (model, message.id, message_chars(message))
        cached = self._exact_cache.get(key)
        if cached is None:
            calls = "".join(call.name + call.arguments for call in message.tool_calls or [])
            cached = MESSAGE_OVERHEAD_TOKENS + counter(message.content) + (counter(calls) if calls else 0)
            if len(self._exact_cache) >= EXACT_CACHE_ENTRIES:
                self._exact_cache.clear()
            self._exact_cache[key] = cached
        return cached + image_cost

    def messages(self, messages: list[Message], model: str | None = None, images_in_prompt: int | None = None) -> int:
        """Tokens of a conversation. `images_in_prompt`: the images of only the newest this-many user messages
        with images are sent as images (`media.imagesInPrompt`; 0 when the model cannot see them), the
        others as text stand-ins; None counts every image as sent."""
        if self.exact_counter(model) is not None:
            return sum(self._as_sent(messages, model, images_in_prompt))
        # This runs over the whole conversation a few times a turn: the messages without media are a tally
        # kept as the conversation grows (their characters over the ratio, and their framing).
        tally = self._tallies.over(messages)
        text = MESSAGE_OVERHEAD_TOKENS * tally.plain + math.ceil(tally.plain_chars / self.ratio_for(model))
        return text + sum(self._as_sent(tally.with_media, model, images_in_prompt))

    def _as_sent(self, messages: list[Message], model: str | None, images_in_prompt: int | None) -> Iterator[int]:
        """The tokens of each message, its images counted as images or as stand-ins (newest first)."""
        with_images_seen = 0
        for message in reversed(messages):
            sent = images_in_prompt is None or with_images_seen < images_in_prompt
            if message.role is Role.USER and _images(message):
                with_images_seen += 1
            yield self.message(message, model, images_sent=sent)

    def payload(
        self, wire_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, model: str | None = None
    ) -> int:
        """Tokens of a whole request in the OpenAI wire format: messages, tool schemas and image parts
        (a data URL does not say its pixel size: each counts `UNKNOWN_SIZE_IMAGE_TOKENS`)."""
        framing = MESSAGE_OVERHEAD_TOKENS * len(wire_messages) + UNKNOWN_SIZE_IMAGE_TOKENS * image_parts(wire_messages)
        counter = self.exact_counter(model)
        if counter is not None:
            return framing + counter(payload_text(wire_messages, tools))
        return framing + math.ceil(payload_chars(wire_messages, tools) / self.ratio_for(model))

    def tool_schemas(self, schemas: list[dict[str, Any]], model: str | None = None) -> int:
        if not schemas:
            return 0
        return self.text(self._schemas_json(schemas), model)

    def _schemas_json(self, schemas: list[dict[str, Any]]) -> str:
        if self._schemas_seen is not schemas:
            self._schemas_seen, self._schemas_text = schemas, json.dumps(schemas, ensure_ascii=False)
            self._schemas_size = WireSize(0, len(self._schemas_text), 0, repeated_chars(self._schemas_text))
        return self._schemas_text

    def calibrate(self, model: str, sent_chars: int, prompt_tokens: int, messages: int = 0) -> None:
        """Move `model`'s ratio towards what the provider reported for a request of `sent_chars`."""
        if self.exact_counter(model) is not None:
            return
        content_tokens = prompt_tokens - MESSAGE_OVERHEAD_TOKENS * messages
        if sent_chars <= 0 or content_tokens < MIN_CALIBRATION_TOKENS:
            return
        observed = sent_chars / content_tokens
        if not MIN_CHARS_PER_TOKEN <= observed <= MAX_CHARS_PER_TOKEN:
            log.debug("[Context] Ignored an odd calibration sample for %s: %.2f chars/token", model, observed)
            return
        current = self.ratio_for(model)
        self._calibrated[model] = CALIBRATION_SMOOTHING * observed + (1 - CALIBRATION_SMOOTHING) * current
        self._samples[model] = self._samples.get(model, 0) + 1

    def request(self, model: str, sent: WireSize, tools: list[dict[str, Any]] | None) -> int:
        """Tokens of a sent request (what its messages held: `WireSize.of` them, and the tool schemas),
        its images left out."""
        return self.sized(model, self.with_tools(sent, tools))

    def with_tools(self, sent: WireSize, tools: list[dict[str, Any]] | None) -> WireSize:
        """`sent` with the characters of the tool schemas offered with it."""
        if not tools:
            return sent
        self._schemas_json(tools)
        return sent + self._schemas_size

    def sized(self, model: str, size: WireSize) -> int:
        """Tokens of a request of `size` (tool schemas included) at `model`'s ratio, its images left out."""
        return MESSAGE_OVERHEAD_TOKENS * size.messages + math.ceil(size.chars / self.ratio_for(model))

    def observe_request(
        self, model: str, sent: WireSize, tools: list[dict[str, Any]] | None, prompt_tokens: int
    ) -> None:
        """Calibrate from one sent request (what its messages held: `WireSize.of` them) and the
        `prompt_tokens` the provider reported for it.

        A request with images is not used: the provider's count includes the images by its own rule,
        which says nothing about how many characters its tokenizer puts in a token."""
        if self.exact_counter(model) is not None or sent.image_parts:
            return  # exact counts need no calibration
        # Counted, not joined into one text, with the tool schemas' JSON made once: this runs every turn.
        self.calibrate(model, self.with_tools(sent, tools).chars, prompt_tokens, sent.messages)


@dataclass
class _Tally:
    """A conversation's messages without media, counted (their framing and characters), and the others."""

    plain: int = 0
    plain_chars: int = 0
    with_media: list[Message] = field(default_factory=list)


def _tallied(tally: _Tally, message: Message) -> _Tally:
    if message.media:
        tally.with_media.append(message)
    else:
        tally.plain += 1
        tally.plain_chars += message_chars(message)
    return tally


def message_chars(message: Message) -> int:
    """Characters of a message that reach the model: its text and any tool-call names and arguments."""
    chars = len(message.content)
    for call in message.tool_calls or []:
        chars += len(call.name) + len(call.arguments)
    return chars


def payload_text(wire_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The text of a wire payload that the model reads: contents, tool calls and tool schemas."""
    pieces: list[str] = []
    for wire in wire_messages:
        content = wire.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces += [str(part.get("text", "")) for part in content if isinstance(part, dict)]
        for call in wire.get("tool_calls") or []:
            function = call.get("function", {})
            pieces += [str(function.get("name", "")), str(function.get("arguments", ""))]
    if tools:
        pieces.append(json.dumps(tools, ensure_ascii=False))
    return "".join(pieces)


def payload_chars(wire_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """The length of `payload_text`, without building it."""
    return wire_chars(wire_messages) + (len(json.dumps(tools, ensure_ascii=False)) if tools else 0)

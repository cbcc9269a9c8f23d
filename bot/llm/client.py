"""`LlmClient`: chat completions against any OpenAI-compatible endpoint through `openai.AsyncOpenAI`.

Retries with backoff (429 honouring `retry-after`, 5xx, connection errors and timeouts) are the
`openai` library's own; this module sets their count and the timeout from runtime-config, records
the provider-reported usage of every call, and turns the library's exceptions into `LlmError`.
"""

from __future__ import annotations

import functools
import json
import logging
import ssl
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI, AsyncStream, RequestOptions
from openai.types.chat import ChatCompletion

from bot.domain.message import ToolCall
from bot.domain.turn import Usage
from bot.llm.errors import LlmError, LlmFailure
from bot.llm.spending import Purpose, TokenSpending
from bot.llm.windows import window_from_refusal
from bot.llm.wire import wire_bytes
from bot.logging_setup import redact
from bot.metrics import BotMetrics

log = logging.getLogger(__name__)

# The openai client insists on a key; local servers (Ollama, llama.cpp) accept any.
_PLACEHOLDER_API_KEY = "no-key-configured"


@dataclass(frozen=True)
class ChatRequest:
    """One call: the model, OpenAI-format messages and tool schemas, and the call's limits."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    # Each of `messages` as JSON (UTF-8), when the caller has them (`WireForms` keeps each message's JSON
    # as a conversation grows): the request then does not encode the whole history again.
    messages_json: list[bytes] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_seconds: float = 60.0
    max_retries: int = 2
    # What the call is for, as `/status` and `/metrics` split the tokens spent.
    purpose: Purpose = "other"


@dataclass
class ChatResult:
    """The model's answer: text and/or tool calls, and what the provider says it cost."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class TranscriptSegment:
    """A stretch of a transcript with Whisper's confidence in it (`verbose_json` segments)."""

    start: float
    end: float
    # The mean log-probability of the segment's tokens (0 is certain; Whisper retries below -1).
    avg_logprob: float
    # The probability that the stretch holds no speech at all.
    no_speech_prob: float


@dataclass(frozen=True)
class Transcript:
    """What the endpoint heard: the text and, where it gives them, the clip's length and the segments."""

    text: str
    duration_seconds: float | None = None
    segments: tuple[TranscriptSegment, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    """A piece of streamed answer text."""

    text: str


CHAT_PATH = "/chat/completions"
# What `chat.completions.create` adds to a request: the JSON content type and the bearer key.
_JSON_REQUEST: RequestOptions = {"headers": {"Content-Type": "application/json"}, "security": {"bearer_auth": True}}


# Clients kept for the pairs of limits (timeout, retries) requests ask for: chat, summaries, extraction.
CLIENTS_WITH_LIMITS = 8


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings of every model client of the process (the HTTP library's defaults): reading the
    machine's certificate store takes tens of milliseconds of CPU, once a process rather than once a client."""
    return httpx2.create_ssl_context()


class LlmClient:
    """The one way the bot talks to a model."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        metrics: BotMetrics | None = None,
        max_connections: int = 32,
        spending: TokenSpending | None = None,
    ) -> None:
        self._metrics = metrics or BotMetrics()
        # Tokens by purpose, today and in total (None: not counted, as in tools that make a client of their own).
        self.spending = spending
        # An endpoint may echo the key in an error ("Incorrect API key provided: ..."); it is cut from
        # the error's text, which is logged, shown in /status and stored with a failed RAG document.
        self._secrets = [api_key] if api_key else []
        # When the last model call ended and how ("ok" or the failure), for /healthz.
        self.last_call: tuple[datetime, str] | None = None
        # Transcription models that refused `verbose_json`: asked for plain text from then on.
        self._plain_transcription_models: set[str] = set()
        # A bounded pool: the HTTP library checks every pooled connection on each request, so a pool
        # grown to hundreds of idle connections cost more CPU than the requests themselves.
        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = AsyncOpenAI(
            api_key=api_key or _PLACEHOLDER_API_KEY,
            base_url=base_url,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits, verify=_tls_context()),
        )
        self._with_limits: dict[tuple[float, int], AsyncOpenAI] = {}
        self._tools_seen: tuple[list[dict[str, Any]], bytes] | None = None

    async def close(self) -> None:
        await self._client.close()
        if self.spending is not None:
            await self.spending.close()

    async def model_ids(self, timeout_seconds: float) -> list[str]:
        """The models the endpoint serves (`GET /models`), in its order; `LlmError` when it cannot say."""
        with _translated_errors("(models)", self._secrets):
            page = await self._client.with_options(timeout=timeout_seconds, max_retries=0).models.list()
            return [model.id async for model in page]

    async def complete(self, request: ChatRequest) -> ChatResult:
        """A whole answer in one response."""
        started = time.monotonic()
        with self._counted(request.model), _translated_errors(request.model, self._secrets):
            response = await self._client_for(request).post(
                CHAT_PATH, cast_to=ChatCompletion, content=self._body(request), options=_JSON_REQUEST
            )
            if not response.choices:
                raise LlmError(LlmFailure.BAD_RESPONSE, "the response has no choices")
        choice = response.choices[0]
        calls = [
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
            for call in choice.message.tool_calls or []
            if call.type == "function"
        ]
        usage = self._record_usage(request.model, response.usage.model_dump() if response.usage else None)
        self._spend(request, usage, choice.message.content or "", calls)
        log.info(
            "[LLM] %s answered in %.2fs (%s prompt tokens, %s cached)",
            request.model,
            time.monotonic() - started,
            usage.prompt_tokens if usage else "?",
            usage.cached_tokens if usage else "?",
        )
        return ChatResult(choice.message.content or "", calls, usage, choice.finish_reason)

    async def stream(self, request: ChatRequest) -> AsyncGenerator[TextDelta | ChatResult, None]:
        """Text deltas as the model writes, then the whole `ChatResult` as the last item."""
        text_parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Usage | None = None
        finish_reason: str | None = None
        with self._counted(request.model), _translated_errors(request.model, self._secrets):
            chunks = await self._client_for(request).post(
                CHAT_PATH,
                cast_to=ChatCompletion,
                content=self._body(request, stream=True),
                options=_JSON_REQUEST,
                stream=True,
                # Each chunk as its parsed JSON: the library still reads the events and raises on an error
                # event, but a chunk is not made into a pydantic model (about two thirds of a chunk's CPU).
                stream_cls=AsyncStream[object],
            )
            async for chunk in chunks:
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("usage"):
                    usage = self._record_usage(request.model, chunk["usage"])
                for choice in _dicts(chunk.get("choices")):
                    finish_reason = choice.get("finish_reason") or finish_reason
                    delta = choice.get("delta") or {}
                    content = delta.get("content")
                    if isinstance(content, str) and content:
                        text_parts.append(content)
                        yield TextDelta(content)
                    for call in _dicts(delta.get("tool_calls")):
                        slot = calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        function = call.get("function") or {}
                        slot["name"] += function.get("name") or ""
                        slot["arguments"] += function.get("arguments") or ""
        tool_calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}") for c in calls.values()]
        self._spend(request, usage, "".join(text_parts), tool_calls)
        yield ChatResult("".join(text_parts), tool_calls, usage, finish_reason)

    async def embed(self, texts: list[str], model: str, timeout_seconds: float = 30.0) -> list[list[float]]:
        """One embedding vector per text, in order, from the endpoint's `/embeddings`."""
        if not texts:
            return []
        with self._counted(model), _translated_errors(model, self._secrets):
            response = await self._client.with_options(timeout=timeout_seconds).embeddings.create(
                model=model, input=texts, encoding_format="float"
            )
        vectors = sorted(response.data, key=lambda entry: entry.index)
        if len(vectors) != len(texts):
            raise LlmError(LlmFailure.BAD_RESPONSE, f"{len(vectors)} embeddings for {len(texts)} texts")
        return [list(entry.embedding) for entry in vectors]

    async def transcribe(
        self, audio: bytes, file_name: str, mime: str, model: str, timeout_seconds: float = 120.0
    ) -> Transcript:
        """The text of a voice note or audio file, from the endpoint's `/audio/transcriptions`.

        Asks for `verbose_json` (Whisper's segments with their confidence, and the clip's duration), so
        the caller can tell an unclear transcript; an endpoint or model that refuses that format (a 400
        naming `response_format`) is asked for plain `json` instead, now and from then on. An endpoint
        without the API raises `LlmError(UNSUPPORTED)`; audio it cannot decode is a 400 (`BAD_REQUEST`),
        whose detail says why.
        """
        verbose = model not in self._plain_transcription_models
        with self._counted(model), _translated_errors(model, self._secrets):
            try:
                result = await self._transcription(audio, file_name, mime, model, timeout_seconds, verbose)
            except openai.BadRequestError as error:
                if not (verbose and _refuses_verbose_json(error)):
                    raise
                log.info("[LLM] %s does not give verbose_json transcripts; asking for plain text", model)
                self._plain_transcription_models.add(model)
                result = await self._transcription(audio, file_name, mime, model, timeout_seconds, False)
            except openai.APIStatusError as error:
                if error.status_code in (404, 405, 501):
                    detail = _short(error, self._secrets)
                    log.warning("[LLM] %s: the endpoint has no audio transcription: %s", model, detail)
                    raise LlmError(LlmFailure.UNSUPPORTED, detail) from error
                raise
        return _transcript_from(result)

    async def _transcription(
        self, audio: bytes, file_name: str, mime: str, model: str, timeout_seconds: float, verbose: bool
    ) -> object:
        client = self._client.with_options(timeout=timeout_seconds)
        file = (file_name, audio, mime or "application/octet-stream")
        if verbose:
            return await client.audio.transcriptions.create(model=model, file=file, response_format="verbose_json")
        return await client.audio.transcriptions.create(model=model, file=file)

    @contextmanager
    def _counted(self, model: str) -> Iterator[None]:
        try:
            yield
        except LlmError as error:
            self._metrics.model_calls.labels(model, error.failure.value).inc()
            self._metrics.errors.labels(f"model_{error.failure.value}").inc()
            self.last_call = (datetime.now(UTC), error.failure.value)
            raise
        self._metrics.model_calls.labels(model, "ok").inc()
        self.last_call = (datetime.now(UTC), "ok")

    def _body(self, request: ChatRequest, stream: bool = False) -> bytes:
        """The request's JSON body, made here rather than by `chat.completions.create`: the messages and
        tool schemas are already in wire form, and the library's transform of them walks every nested
        value again; and a conversation's messages come encoded already when the
        caller keeps them so (`ChatRequest.messages_json`), leaving only the new ones to encode."""
        head: dict[str, Any] = {"model": request.model}
        if stream:
            head |= {"stream": True, "stream_options": {"include_usage": True}}
        if request.temperature is not None:
            head["temperature"] = request.temperature
        if request.max_tokens is not None:
            head["max_tokens"] = request.max_tokens
        messages = request.messages_json
        if messages is None:
            messages = [wire_bytes(message) for message in request.messages]
        tools = b',"tools":' + self._tools_wire_json(request.tools) if request.tools else b""
        # One join of the parts: the history's JSON is copied once, not once per concatenation.
        return b"".join((wire_bytes(head)[:-1], b',"messages":[', b",".join(messages), b"]", tools, b"}"))

    def _tools_wire_json(self, tools: list[dict[str, Any]]) -> bytes:
        """The tool schemas' JSON: the registry hands out the same list until a tool changes."""
        if self._tools_seen is None or self._tools_seen[0] is not tools:
            self._tools_seen = (tools, wire_bytes(tools))
        return self._tools_seen[1]

    def _client_for(self, request: ChatRequest) -> AsyncOpenAI:
        """The client with the request's limits: made once per pair of limits (a copy builds a whole new
        client over the same connection pool) and kept, since the configuration rarely changes them."""
        limits = (request.timeout_seconds, request.max_retries)
        client = self._with_limits.get(limits)
        if client is None:
            client = self._client.with_options(timeout=request.timeout_seconds, max_retries=request.max_retries)
            if len(self._with_limits) >= CLIENTS_WITH_LIMITS:
                self._with_limits.clear()  # the limits were edited many times: start over
            self._with_limits[limits] = client
        return client

    def _spend(self, request: ChatRequest, usage: Usage | None, text: str, calls: list[ToolCall]) -> None:
        if self.spending is not None:
            answer = text + "".join(call.name + call.arguments for call in calls)
            self.spending.count_call(request.purpose, request.model, usage, request.messages, answer)

    def _record_usage(self, model: str, reported: object) -> Usage | None:
        """The provider's `usage` object (parsed JSON) as a `Usage`, counted in the metrics."""
        if not isinstance(reported, dict):
            return None
        details = reported.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None  # not all have a cache
        usage = Usage(
            _count(reported.get("prompt_tokens")), _count(reported.get("completion_tokens")), model, _count(cached)
        )
        self._metrics.model_tokens.labels(model, "prompt").inc(usage.prompt_tokens)
        self._metrics.model_tokens.labels(model, "completion").inc(usage.completion_tokens)
        self._metrics.model_tokens.labels(model, "cached").inc(usage.cached_tokens)
        return usage


def _dicts(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON list (a chunk's `choices`, a delta's `tool_calls`); anything else is none."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _count(value: object) -> int:
    """A token count as reported (a provider may send null or leave it out: 0)."""
    return value if type(value) is int else 0


def _refuses_verbose_json(error: openai.BadRequestError) -> bool:
    """A 400 about the response format (OpenAI: "response_format 'verbose_json' is not compatible with model
    'gpt-4o-transcribe'"), not about the audio."""
    text = str(error).lower()
    return "response_format" in text or "verbose_json" in text


def _transcript_from(result: object) -> Transcript:
    """The endpoint's answer as a `Transcript`: a bare string, `{"text"}`, or verbose_json with segments.

    Servers that take `verbose_json` but leave fields out (a local Whisper server without segments, or
    segments without probabilities) give what they have; a segment without both probabilities is skipped.
    """
    if isinstance(result, str):
        return Transcript(result.strip())
    segments: list[TranscriptSegment] = []
    for segment in getattr(result, "segments", None) or []:
        values = [getattr(segment, name, None) for name in ("start", "end", "avg_logprob", "no_speech_prob")]
        if all(isinstance(value, int | float) for value in values):
            start, end, logprob, no_speech = (float(value) for value in values)  # type: ignore[arg-type]
            segments.append(TranscriptSegment(start, end, logprob, no_speech))
    duration = getattr(result, "duration", None)
    return Transcript(
        str(getattr(result, "text", "") or "").strip(),
        float(duration) if isinstance(duration, int | float) and duration > 0 else None,
        tuple(segments),
    )


@contextmanager
def _translated_errors(model: str, secrets: list[str]) -> Iterator[None]:
    """Turns the openai library's exceptions into `LlmError`, logged once with the reason (secrets cut)."""
    try:
        yield
    except LlmError:
        raise
    except Exception as error:
        failure = _classify(error)
        if failure is None:
            raise
        detail = _short(error, secrets)
        log.warning("[LLM] %s call failed (%s): %s", model, failure.value, detail)
        window = window_from_refusal(str(error)) if failure is LlmFailure.CONTEXT_LENGTH else None
        raise LlmError(failure, detail, window) from error


def _classify(error: Exception) -> LlmFailure | None:
    if isinstance(error, openai.APITimeoutError):
        return LlmFailure.TIMEOUT
    if isinstance(error, openai.APIConnectionError):
        return LlmFailure.UNREACHABLE
    if isinstance(error, openai.RateLimitError):
        return LlmFailure.RATE_LIMITED
    if isinstance(error, openai.AuthenticationError | openai.PermissionDeniedError):
        return LlmFailure.AUTH
    # Before the 5xx: llama.cpp's server has sent its context-size refusal with status 500.
    if isinstance(error, openai.APIStatusError) and (error.status_code == 413 or _is_context_length(error)):
        return LlmFailure.CONTEXT_LENGTH
    if isinstance(error, openai.InternalServerError):
        return LlmFailure.SERVER_ERROR
    if isinstance(error, openai.APIStatusError):
        if error.status_code >= 500:
            return LlmFailure.SERVER_ERROR
        return LlmFailure.BAD_REQUEST
    if isinstance(error, openai.APIError | json.JSONDecodeError):
        return LlmFailure.BAD_RESPONSE
    return None


# What the refusals of a too long prompt say, by provider (OpenAI, vLLM, OpenRouter; llama.cpp server;
# Anthropic; vLLM's prompt check; Mistral).
_CONTEXT_LENGTH_WORDS = (
    "context length", "context_length", "context size", "exceed_context_size", "prompt is too long",
    "maximum model length", "too large for model",
)  # fmt: skip


def _is_context_length(error: openai.APIStatusError) -> bool:
    code = getattr(error, "code", None)
    text = str(error).lower()
    return code == "context_length_exceeded" or any(words in text for words in _CONTEXT_LENGTH_WORDS)


def _short(error: Exception, secrets: list[str]) -> str:
    # Cut after redacting, so no prefix of a secret is left at the edge.
    return redact(str(error), secrets).replace("\n", " ")[:300]

"""A fake OpenAI-compatible HTTP server for tests.

``FakeOpenAI`` serves ``/v1/chat/completions`` (plain and SSE streaming), ``/v1/embeddings``,
``/v1/audio/transcriptions`` (multipart, like OpenAI's; switch it off with ``transcriptions_supported``;
``verbose_json`` with Whisper-style segments from ``transcript_segments``, or refused like
``gpt-4o-transcribe`` refuses it with ``verbose_json_supported = False``)
and ``/v1/models`` on 127.0.0.1 from its own thread and event loop, so one instance works from sync tests,
async tests and for a bot running in a subprocess. Point a real ``openai`` client at ``fake.base_url``.

Chat replies come from a queue filled with ``script()`` (one item per chat request: a ``str``, a
``Reply`` or a ``Fault``); when the queue is empty the responder answers (``"echo: <last user message>"``
unless replaced with ``set_responder()``). Every request is recorded in ``fake.requests``.
``serves_embeddings = False`` makes ``/v1/embeddings`` answer 404, as an endpoint without embeddings does.
``window_tokens`` gives the model a real window smaller than the bot may believe: with ``window_behaviour``
``"refuse"`` a longer prompt gets OpenAI's ``context_length_exceeded`` refusal stating the window (counted
in ``refusals``); with ``"cut"`` its oldest messages are dropped until it fits, as Ollama does past
``num_ctx``, and the usage reports the smaller count (counted in ``cuts``): the responder sees what is kept.
The usage counts 4 characters a token; ``token_count = "mixed"`` counts as a real tokenizer varies instead
(ASCII words 4 characters a token, ASCII punctuation 2, any other character 0.7 tokens, a run of one
character 16), for tests that need code and non-Latin text to cost more tokens a character than prose,
and indentation far fewer.

Run standalone with ``python -m tests.fakes.openai_server --port 0``: prints ``PORT=<n>`` and serves
with the echo responder until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import email.parser
import email.policy
import hashlib
import json
import math
import re
import signal
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Literal, NoReturn, Self

from aiohttp import web

JSONDict = dict[str, Any]

DEFAULT_EMBEDDING_DIMENSIONS = 64
DEFAULT_MODELS = ("fake-model",)
_FINGERPRINT = "fp_fake"
_JSON_BODY = web.RequestKey("fake_openai_json", object)


@dataclass(frozen=True)
class Usage:
    """Token counts reported for one chat completion."""

    prompt_tokens: int
    completion_tokens: int
    # Prompt tokens served from the provider's prompt cache (OpenAI's `prompt_tokens_details`).
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> JSONDict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True)
class ToolCallSpec:
    """A tool call the fake model makes; ``arguments`` may be a dict (sent as JSON), ``id`` is auto-made."""

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str | None = None

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One scripted assistant answer.

    ``usage=None`` means a plausible estimate (≈ characters / 4); ``delay`` seconds pass (without
    blocking other requests) before answering; with ``held_until`` the answer waits, just as
    unblocking, until the test sets that event (a slow call whose end the test decides, no clock
    involved); ``finish_reason=None`` means ``"tool_calls"`` when tool calls are given, else ``"stop"``.
    """

    text: str | None = None
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    usage: Usage | None = None
    delay: float = 0.0
    finish_reason: str | None = None
    held_until: threading.Event | None = None

    def resolved_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


FaultKind = Literal[
    "status", "rate_limit", "hang", "context_length_exceeded", "malformed_json", "disconnect", "error_event"
]


@dataclass(frozen=True)
class Fault:
    """A failure for exactly one chat request; build it with the class methods, queue it with ``script()``."""

    kind: FaultKind
    http_status: int = 200
    message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    retry_after: float | None = None
    seconds: float = 0.0
    after_chunks: int = 0

    @classmethod
    def status(
        cls,
        code: int,
        message: str = "The server had an error while processing your request. Sorry about that!",
        *,
        error_type: str | None = None,
        error_code: str | None = None,
        retry_after: float | None = None,
    ) -> Fault:
        """An HTTP error ``code`` with an OpenAI-style ``{"error": {...}}`` body."""
        default_type = "server_error" if code >= 500 else "invalid_request_error"
        return cls(
            kind="status",
            http_status=code,
            message=message,
            error_type=error_type or default_type,
            error_code=error_code,
            retry_after=retry_after,
        )

    @classmethod
    def rate_limit(cls, retry_after: float | None = None) -> Fault:
        """429 ``rate_limit_exceeded``, with a ``retry-after`` header (seconds) when given."""
        hint = f" Please try again in {retry_after}s." if retry_after is not None else ""
        return cls(
            kind="rate_limit",
            http_status=429,
            message=f"Rate limit reached for requests on fake-model.{hint}",
            error_type="requests",
            error_code="rate_limit_exceeded",
            retry_after=retry_after,
        )

    @classmethod
    def hang(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (ended early by ``stop()``) and then answer normally: trips client timeouts."""
        return cls(kind="hang", seconds=seconds)

    @classmethod
    def context_length_exceeded(cls, max_tokens: int = 8192, requested: int = 9000) -> Fault:
        """400 with code ``context_length_exceeded`` and OpenAI's wording."""
        message = (
            f"This model's maximum context length is {max_tokens} tokens. However, your messages "
            f"resulted in {requested} tokens. Please reduce the length of the messages."
        )
        return cls(
            kind="context_length_exceeded",
            http_status=400,
            message=message,
            error_type="invalid_request_error",
            error_code="context_length_exceeded",
        )

    @classmethod
    def malformed_json(cls) -> Fault:
        """200 whose body (or SSE ``data:`` line, when streaming) is not valid JSON."""
        return cls(kind="malformed_json")

    @classmethod
    def disconnect(cls, after_chunks: int = 0) -> Fault:
        """Close the connection without a response (streaming: optionally after ``after_chunks`` chunks)."""
        return cls(kind="disconnect", after_chunks=after_chunks)

    @classmethod
    def error_event(cls, message: str, after_chunks: int = 1) -> Fault:
        """Streaming: ``after_chunks`` chunks, then an SSE event ``{"error": {...}}`` (as OpenAI and
        OpenRouter send when a stream fails midway) and the end of the stream."""
        return cls(kind="error_event", message=message, error_type="server_error", after_chunks=after_chunks)


@dataclass(frozen=True)
class TranscriptSegment:
    """One segment of a ``verbose_json`` transcript, with Whisper's confidence figures."""

    start: float
    end: float
    avg_logprob: float = -0.2
    no_speech_prob: float = 0.01
    text: str = ""

    def to_json(self, index: int) -> JSONDict:
        return {
            "id": index, "seek": 0, "start": self.start, "end": self.end, "text": self.text, "tokens": [50364],
            "temperature": 0.0, "avg_logprob": self.avg_logprob, "compression_ratio": 1.2,
            "no_speech_prob": self.no_speech_prob,
        }  # fmt: skip


ReplyLike = Reply | Fault | str
Responder = Callable[[JSONDict], ReplyLike]


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the fake received; header names are lower-cased, ``json`` is None if unparsable."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any


def message_text(content: Any) -> str:
    """Text of a chat message ``content`` (a string, a list of content parts, or None)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def echo_responder(request: JSONDict) -> Reply:
    """The default responder: ``"echo: <content of the last user message>"``."""
    user_messages = [m for m in request.get("messages", []) if isinstance(m, dict) and m.get("role") == "user"]
    last = message_text(user_messages[-1].get("content")) if user_messages else ""
    return Reply(text=f"echo: {last}")


def _unit_hash_vector(text: str, dimensions: int) -> list[float]:
    digest = hashlib.shake_256(text.encode()).digest(2 * dimensions)
    values = [v / 32767.5 - 1.0 for v in struct.unpack(f"<{dimensions}H", digest)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def fake_embedding(text: str, dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS) -> list[float]:
    """The L2-normalised vector the fake returns for ``text``.

    It sums per-word hash vectors plus a smaller whole-text hash vector, so it is deterministic,
    differs for different texts, and texts sharing words have a higher cosine similarity.
    """
    vector = [0.5 * v for v in _unit_hash_vector(text, dimensions)]
    for word in re.findall(r"\w+", text.lower()):
        for i, v in enumerate(_unit_hash_vector("word:" + word, dimensions)):
            vector[i] += v
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _embedding_inputs(raw: Any) -> list[str]:
    """Embedding ``input`` (a string, strings, token ids or lists of token ids) as a list of texts."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        return [" ".join(map(str, raw))]
    if isinstance(raw, list):
        return [item if isinstance(item, str) else " ".join(map(str, item)) for item in raw]
    return [str(raw)]


def _error_body(message: str, error_type: str | None, code: str | None, param: str | None = None) -> JSONDict:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _error_response(
    status: int,
    message: str,
    error_type: str | None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.json_response(_error_body(message, error_type, code), status=status, headers=headers)


def _split_words(text: str) -> list[str]:
    """Stream pieces of ``text``: words with their trailing whitespace (joining gives ``text`` back)."""
    return re.findall(r"\S+\s*|\s+", text)


def _fragments(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# How the usage counts a text's tokens: "flat" 4 characters a token; "mixed" as a real tokenizer varies.
TokenCount = Literal["flat", "mixed"]
_ASCII_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")
# A run of one character (indentation, a rule of dashes): one token for up to 16 of it.
_RUN = re.compile(r"(.)\1{2,}", re.DOTALL)


def _text_tokens(text: str, count: TokenCount) -> float:
    if count == "flat":
        return len(text) / 4
    runs = [len(run.group()) for run in _RUN.finditer(text)]
    text = _RUN.sub("", text)
    other = len(text) - len(text.encode("ascii", "ignore"))
    punctuation = len(_ASCII_PUNCTUATION.findall(text))
    return (len(text) - other - punctuation) / 4 + punctuation / 2 + other * 0.7 + sum(-(-run // 16) for run in runs)


def _message_tokens(messages: Sequence[JSONDict], count: TokenCount) -> float:
    tokens = sum(_text_tokens(message_text(m.get("content")), count) for m in messages)
    return tokens + sum(_text_tokens(json.dumps(call), count) for m in messages for call in m.get("tool_calls") or [])


def _tools_tokens(request: JSONDict, count: TokenCount) -> float:
    return _text_tokens(json.dumps(request["tools"]), count) if request.get("tools") else 0.0


def _prompt_tokens(request: JSONDict, count: TokenCount = "flat") -> int:
    """The prompt tokens of a chat request as the usage counts them."""
    messages = [m for m in request.get("messages", []) if isinstance(m, dict)]
    return max(1, int(_message_tokens(messages, count) + _tools_tokens(request, count)))


def _cut_to_window(request: JSONDict, window_tokens: int, count: TokenCount) -> JSONDict:
    """`request` with its oldest messages after the first system message dropped until it fits the window,
    the newest message always kept (what Ollama does with a prompt past `num_ctx`)."""
    messages = [m for m in request.get("messages", []) if isinstance(m, dict)]
    head = messages[:1] if messages and messages[0].get("role") == "system" else []
    rest = messages[len(head) :]
    cut = dict(request)
    while len(rest) > 1:
        cut["messages"] = head + rest
        if _prompt_tokens(cut, count) <= window_tokens:
            break
        rest = rest[1:]
    cut["messages"] = head + rest
    return cut


def _estimate_usage(
    request: JSONDict,
    reply: Reply,
    calls: Sequence[tuple[str, str, str]],
    previous: JSONDict | None = None,
    count: TokenCount = "flat",
) -> Usage:
    # Like a real provider, the prompt count includes tool calls and the tool schemas, not just the text.
    messages = [m for m in request.get("messages", []) if isinstance(m, dict)]
    tools_tokens = _tools_tokens(request, count)
    completion_chars = len(reply.text or "") + sum(len(name) + len(args) for _, name, args in calls)
    # A prompt cache like a real provider's: the leading messages the previous request had too (with the
    # same tools) are served from it.
    cached_tokens = 0.0
    if previous is not None and previous.get("tools") == request.get("tools"):
        before = [m for m in previous.get("messages", []) if isinstance(m, dict)]
        same = next((i for i, (a, b) in enumerate(zip(messages, before, strict=False)) if a != b), None)
        shared = messages[: min(len(messages), len(before)) if same is None else same]
        cached_tokens = _message_tokens(shared, count) + tools_tokens if shared else 0.0
    return Usage(
        prompt_tokens=max(1, int(_message_tokens(messages, count) + tools_tokens)),
        completion_tokens=max(1, completion_chars // 4),
        cached_tokens=int(cached_tokens),
    )


class _Completion:
    """Everything needed to render one chat completion, plain or as SSE chunks."""

    def __init__(
        self, request: JSONDict, reply: Reply, previous: JSONDict | None = None, count: TokenCount = "flat"
    ) -> None:
        self.reply = reply
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = str(request.get("model", DEFAULT_MODELS[0]))
        self.calls = [
            (tc.id or f"call_{uuid.uuid4().hex[:24]}", tc.name, tc.arguments_json()) for tc in reply.tool_calls
        ]
        self.usage = reply.usage or _estimate_usage(request, reply, self.calls, previous, count)

    def body(self) -> JSONDict:
        message: JSONDict = {"role": "assistant", "content": self.reply.text, "refusal": None}
        if self.calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in self.calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": _FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.reply.resolved_finish_reason(),
                }
            ],
            "usage": self.usage.to_json(),
        }

    def chunks(self, include_usage: bool) -> list[JSONDict]:
        """SSE chunks like OpenAI's: role, content words, tool-call name then argument fragments, finish."""

        def chunk(choices: list[JSONDict], usage: JSONDict | None = None) -> JSONDict:
            data: JSONDict = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": _FINGERPRINT,
                "choices": choices,
            }
            if include_usage:
                data["usage"] = usage
            return data

        def delta(d: JSONDict, finish_reason: str | None = None) -> JSONDict:
            return chunk([{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish_reason}])

        text = self.reply.text
        out = [delta({"role": "assistant", "content": "" if text is not None else None, "refusal": None})]
        out += [delta({"content": piece}) for piece in _split_words(text or "")]
        for index, (cid, name, args) in enumerate(self.calls):
            head = {
                "index": index,
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            out.append(delta({"tool_calls": [head]}))
            out += [
                delta({"tool_calls": [{"index": index, "function": {"arguments": frag}}]}) for frag in _fragments(args)
            ]
        out.append(delta({}, self.reply.resolved_finish_reason()))
        if include_usage:
            out.append(chunk([], self.usage.to_json()))
        return out


class FakeOpenAI:
    """A fake OpenAI API on 127.0.0.1 running in a background thread; see the module docstring."""

    def __init__(
        self,
        *,
        required_api_key: str | None = None,
        embedding_dimensions: int = DEFAULT_EMBEDDING_DIMENSIONS,
        models: Sequence[str] = DEFAULT_MODELS,
        port: int = 0,
    ) -> None:
        self.required_api_key = required_api_key
        self.embedding_dimensions = embedding_dimensions
        # Seconds every /v1/embeddings response waits (a slow embedding endpoint).
        self.embedding_delay = 0.0
        # False: /v1/embeddings answers 404, as a local server or router without embeddings does.
        self.serves_embeddings = True
        self.models = list(models)
        # /v1/audio/transcriptions: False answers 404 like an endpoint without it; the text it returns.
        self.transcriptions_supported = True
        self.transcript = "this is what the voice note says"
        # response_format=verbose_json: False answers 400 as OpenAI does for a model without it; the clip's
        # duration, and its segments (None: one clear segment over the whole clip; [] none at all).
        self.verbose_json_supported = True
        self.transcript_duration = 2.0
        self.transcript_segments: list[TranscriptSegment] | None = None
        self._transcriptions: list[JSONDict] = []
        # The model's real window in prompt tokens (as the usage counts them), and what a
        # longer prompt gets: "refuse" (a context_length_exceeded refusal) or "cut" (its oldest messages dropped).
        self.window_tokens: int | None = None
        self.window_behaviour: Literal["refuse", "cut"] = "refuse"
        # How the usage (and the window) counts tokens: see `TokenCount`.
        self.token_count: TokenCount = "flat"
        self.refusals = 0
        self.cuts = 0
        self._requested_port = port
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._queue: deque[ReplyLike] = deque()
        self._responder: Responder = echo_responder
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._port: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start serving in a background thread; returns self once the port is bound."""
        if self._thread is not None:
            raise RuntimeError("FakeOpenAI is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._run_loop, args=(loop,), name="fake-openai", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self._port = asyncio.run_coroutine_threadsafe(self._startup(), loop).result(timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop serving: pending hangs and delays end, open connections are closed. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            self._loop = self._thread = self._runner = None
            self._port = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port (only while running)."""
        if self._port is None:
            raise RuntimeError("FakeOpenAI is not running")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: pass it as ``base_url`` to an openai client."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------------

    def script(self, *replies: ReplyLike) -> None:
        """Queue replies (``str``, ``Reply`` or ``Fault``), each consumed by one chat request, in order."""
        with self._lock:
            self._queue.extend(replies)

    def fail_next(self, n: int, fault: Fault) -> None:
        """Queue the same ``fault`` for the next ``n`` chat requests."""
        self.script(*([fault] * n))

    def set_responder(self, responder: Responder) -> None:
        """Replace the default responder (used when the script queue is empty); it gets the request JSON."""
        with self._lock:
            self._responder = responder

    @property
    def queued(self) -> int:
        """How many scripted replies are still waiting to be consumed."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Forget recorded requests and queued replies, and restore the echo responder."""
        with self._lock:
            self._requests.clear()
            self._queue.clear()
            self._responder = echo_responder

    # -- inspection ------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def chat_requests(self) -> list[JSONDict]:
        """JSON bodies of the chat completion requests, in order (faulted ones included)."""
        return [r.json for r in self.requests if r.path == "/v1/chat/completions" and isinstance(r.json, dict)]

    def conversation_requests(self) -> list[JSONDict]:
        """The chat requests of conversations, in order: not the knowledge graph's extraction calls, which
        the indexing sends whenever its scheduler looks, so a test can not count on their being before or
        after a turn."""
        return [r for r in self.chat_requests() if "---Input Text---" not in json.dumps(r)]

    def last_chat_request(self) -> JSONDict:
        """JSON body of the most recent conversation request; LookupError if there is none."""
        chats = self.conversation_requests()
        if not chats:
            raise LookupError("FakeOpenAI has received no conversation requests")
        return chats[-1]

    def transcription_requests(self) -> list[JSONDict]:
        """The form of each /v1/audio/transcriptions request: ``model``, ``fileName``, ``file`` (bytes),
        ``responseFormat`` ("" when not given)."""
        with self._lock:
            return list(self._transcriptions)

    def image_urls(self, body: JSONDict | None = None) -> list[str]:
        """The ``image_url`` URLs of a chat request's messages (the last request by default), in order."""
        body = self.last_chat_request() if body is None else body
        urls: list[str] = []
        for message in body.get("messages", []):
            content = message.get("content") if isinstance(message, dict) else None
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    urls.append(str((part.get("image_url") or {}).get("url", "")))
        return urls

    def user_texts(self, body: JSONDict | None = None) -> list[str]:
        """The text of each user message of a chat request (the last by default): names, quotes and all."""
        body = self.last_chat_request() if body is None else body
        return [message_text(m.get("content")) for m in body.get("messages", []) if m.get("role") == "user"]

    def system_prompts(self) -> list[str | None]:
        """Text of the system messages of each conversation request, in order, joined by a blank line (None
        when it has none): the bot sends what stays the same first and what it made for the message after
        the history."""
        prompts: list[str | None] = []
        for body in self.conversation_requests():
            system = [m for m in body.get("messages", []) if isinstance(m, dict) and m.get("role") == "system"]
            prompts.append("\n\n".join(message_text(m.get("content")) for m in system) if system else None)
        return prompts

    # -- server internals ------------------------------------------------------------------------

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self) -> int:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._middleware])
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions_endpoint)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/v1/models/{model}", self._get_model)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, "127.0.0.1", self._requested_port).start()
        return int(runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep without blocking other requests; True if the server started stopping meanwhile."""
        if seconds > 0:
            try:
                await asyncio.wait_for(self._stopping.wait(), seconds)
            except TimeoutError:
                pass
        return self._stopping.is_set()

    async def _held(self, release: threading.Event | None) -> bool:
        """Wait for the test to set `release` without blocking other requests; True if the server started
        stopping meanwhile."""
        while release is not None and not release.is_set() and not self._stopping.is_set():
            await asyncio.sleep(0.005)
        return self._stopping.is_set()

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Record the request, then enforce ``required_api_key`` like OpenAI (401)."""
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request[_JSON_BODY] = body
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            self._requests.append(RecordedRequest(request.method, request.path, headers, body))
        if self.required_api_key is not None:
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                return _error_response(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an Authorization "
                    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    "invalid_request_error",
                )
            if auth != f"Bearer {self.required_api_key}":
                return _error_response(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return await handler(request)

    def _next_reply(self, body: JSONDict) -> Reply | Fault:
        with self._lock:
            item = self._queue.popleft() if self._queue else None
            responder = self._responder
        if item is None:
            item = responder(body)
        return Reply(text=item) if isinstance(item, str) else item

    def _respond_default(self, body: JSONDict) -> Reply:
        """The responder's reply (used after a hang or before a mid-stream disconnect); Faults become echo."""
        with self._lock:
            responder = self._responder
        item = responder(body)
        if isinstance(item, Fault):
            item = echo_responder(body)
        return Reply(text=item) if isinstance(item, str) else item

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = request[_JSON_BODY]
        if not isinstance(body, dict):
            return _error_response(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        count = self.token_count
        if self.window_tokens is not None and _prompt_tokens(body, count) > self.window_tokens:
            if self.window_behaviour == "refuse":
                with self._lock:
                    self.refusals += 1
                fault = Fault.context_length_exceeded(self.window_tokens, _prompt_tokens(body, count))
                return _error_response(400, fault.message, fault.error_type, fault.error_code)
            body = _cut_to_window(body, self.window_tokens, count)
            with self._lock:
                self.cuts += 1
        try:
            reply = self._next_reply(body)
            if isinstance(reply, Fault) and reply.kind == "hang":
                if await self._sleep(reply.seconds):
                    return self._drop(request)
                reply = self._respond_default(body)
        except Exception as exc:  # a bug in a test's responder: report it, don't let the client retry
            return _error_response(
                500,
                f"FakeOpenAI responder raised {exc!r}",
                "server_error",
                headers={"x-should-retry": "false"},
            )
        if isinstance(reply, Fault):
            return await self._fault(request, body, reply)
        if await self._sleep(reply.delay) or await self._held(reply.held_until):
            return self._drop(request)
        chats = self.chat_requests()
        completion = _Completion(body, reply, chats[-2] if len(chats) > 1 else None, count)
        if not body.get("stream"):
            return web.json_response(completion.body())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await self._stream(request, [json.dumps(c) for c in completion.chunks(include_usage)])

    async def _stream(self, request: web.Request, payloads: Sequence[str], *, done: bool = True) -> web.StreamResponse:
        """Send ``payloads`` as SSE ``data:`` events, then ``data: [DONE]`` unless ``done`` is False."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for payload in payloads:
            await response.write(f"data: {payload}\n\n".encode())
        if done:
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        return response

    async def _fault(self, request: web.Request, body: JSONDict, fault: Fault) -> web.StreamResponse:
        if fault.kind == "disconnect":
            if body.get("stream") and fault.after_chunks > 0:
                chunks = _Completion(body, self._respond_default(body)).chunks(include_usage=False)
                await self._stream(request, [json.dumps(c) for c in chunks[: fault.after_chunks]], done=False)
            return self._drop(request)
        if fault.kind == "error_event" and body.get("stream"):
            chunks = _Completion(body, self._respond_default(body)).chunks(include_usage=False)
            payloads = [json.dumps(c) for c in chunks[: fault.after_chunks]]
            payloads.append(json.dumps(_error_body(fault.message, fault.error_type, None)))
            return await self._stream(request, payloads)
        if fault.kind == "malformed_json":
            broken = '{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"index": 0, '
            if body.get("stream"):
                return await self._stream(request, [broken])
            return web.Response(text=broken, content_type="application/json")
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            headers["retry-after"] = f"{fault.retry_after:g}"
        return _error_response(fault.http_status, fault.message, fault.error_type, fault.error_code, headers)

    @staticmethod
    def _drop(request: web.Request) -> NoReturn:
        """Close the connection without (finishing) a response."""
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body = request[_JSON_BODY]
        if not self.serves_embeddings:
            return _error_response(404, "404 page not found", "invalid_request_error")
        if not isinstance(body, dict) or "input" not in body:
            return _error_response(400, "'input' is a required property", "invalid_request_error")
        if self.embedding_delay and await self._sleep(self.embedding_delay):
            return web.Response(status=503)
        dimensions = int(body.get("dimensions") or self.embedding_dimensions)
        texts = _embedding_inputs(body["input"])
        data = []
        for index, text in enumerate(texts):
            vector = fake_embedding(text, dimensions)
            embedding: list[float] | str = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = max(1, sum(len(t) for t in texts) // 4)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model", "fake-embedding")),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _transcriptions_endpoint(self, request: web.Request) -> web.StreamResponse:
        if not self.transcriptions_supported:
            return await self._not_found(request)
        form = _multipart_form(request.headers.get("Content-Type", ""), await request.read())
        audio = form.get("file")
        record = {
            "model": form.get("model", b"").decode(errors="replace") if isinstance(form.get("model"), bytes) else "",
            "fileName": form.get("file.filename", b"").decode(errors="replace"),
            "file": audio if isinstance(audio, bytes) else b"",
            "responseFormat": form.get("response_format", b"").decode(errors="replace"),
        }
        with self._lock:
            self._transcriptions.append(record)
        if not isinstance(audio, bytes) or not record["model"]:
            return _error_response(400, "'file' and 'model' are required", "invalid_request_error")
        verbose = record["responseFormat"] == "verbose_json"
        if verbose and not self.verbose_json_supported:
            return _error_response(
                400,
                f"response_format 'verbose_json' is not compatible with model '{record['model']}'. "
                "Use 'json' or 'text' instead.",
                "invalid_request_error",
                "unsupported_value",
            )
        if not audio.startswith((b"OggS", b"ID3", b"RIFF", b"fLaC", b"\xff\xfb")):
            return _error_response(
                400,
                "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', 'mp4', 'mpeg', 'mpga', 'oga', 'ogg', "
                "'wav', 'webm']",
                "invalid_request_error",
            )
        if not verbose:
            return web.json_response({"text": self.transcript})
        segments = self.transcript_segments
        if segments is None:
            segments = [TranscriptSegment(0.0, self.transcript_duration, text=self.transcript)]
        return web.json_response(
            {
                "task": "transcribe",
                "language": "english",
                "duration": self.transcript_duration,
                "text": self.transcript,
                "segments": [segment.to_json(index) for index, segment in enumerate(segments)],
            }
        )

    def _model_json(self, model: str) -> JSONDict:
        return {"id": model, "object": "model", "created": 0, "owned_by": "fake-openai"}

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [self._model_json(m) for m in self.models]})

    async def _get_model(self, request: web.Request) -> web.StreamResponse:
        model = request.match_info["model"]
        if model not in self.models:
            return _error_response(
                404, f"The model '{model}' does not exist", "invalid_request_error", "model_not_found"
            )
        return web.json_response(self._model_json(model))

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        return _error_response(
            404, f"Invalid URL ({request.method} {request.path})", "invalid_request_error", "unknown_url"
        )


def _multipart_form(content_type: str, raw: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body; a file field's name is also under ``<field>.filename``."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    form: dict[str, bytes] = {}
    for part in message.iter_parts() if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        form[name] = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename:
            form[f"{name}.filename"] = filename.encode()
    return form


def main(argv: Sequence[str] | None = None) -> None:
    """Serve with the echo responder until killed, after printing ``PORT=<n>``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>'")
    args = parser.parse_args(argv)

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _exit)
    with FakeOpenAI(required_api_key=args.api_key, port=args.port) as fake:
        print(f"PORT={fake.port}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

"""A fake Telegram Bot API server for tests.

`FakeTelegram` runs a small aiohttp server on 127.0.0.1 in its own thread with its own event
loop, so it can serve a bot under test no matter where that bot runs: in a sync test, in an
async test's (function-scoped) loop, or in a subprocess that gets `fake.root` as its Bot API
base URL.  Both python-telegram-bot and aiogram talk to it unchanged:

* PTB: ``ApplicationBuilder().token(fake.token).base_url(f"{fake.root}/bot")
  .base_file_url(f"{fake.root}/file/bot")``
* aiogram: ``Bot(fake.token, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.root)))``

The fake answers like Telegram does (``{"ok": true, "result": ...}`` or
``{"ok": false, "error_code": N, "description": ...}``), validates message text the way Telegram
does (HTML parsing, length in UTF-16 code units, "message is not modified", ...), keeps the
getUpdates offset semantics, records every call, and can inject faults (429, 5xx, dropped
connections, slow answers that were nevertheless applied, a whole outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from types import EllipsisType, TracebackType
from typing import Any, Final, Literal, NoReturn, TypeVar

import aiohttp
from aiohttp import web

__all__ = [
    "MAX_TEXT_LENGTH",
    "BotApiError",
    "DraftRecord",
    "EditRecord",
    "EntityParseError",
    "FakeTelegram",
    "Fault",
    "FaultKind",
    "FormattedText",
    "RecordedCall",
    "SentMessage",
    "UploadedFile",
    "detect_entities",
    "format_text",
    "parse_html",
    "utf16_len",
]

JsonDict = dict[str, Any]
_T = TypeVar("_T")

MAX_TEXT_LENGTH: Final = 4096
"""Telegram's limit for a message text, in UTF-16 code units after entity parsing."""

_FIRST_UPDATE_ID: Final = 500_000_000


def utf16_len(text: str) -> int:
    """Length of `text` in UTF-16 code units, the unit Telegram uses for lengths and offsets."""
    return len(text.encode("utf-16-le")) // 2


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class BotApiError(Exception):
    """An error answer of the Bot API: HTTP status `error_code` with Telegram's `description`.

    Raise it from a handler registered with `FakeTelegram.register_method` to answer with an
    error; the fake raises it internally for every validation failure.
    """

    def __init__(
        self,
        error_code: int,
        description: str,
        *,
        retry_after: int | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> None:
        super().__init__(f"{error_code}: {description}")
        self.error_code = error_code
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id

    def to_json(self) -> JsonDict:
        """The JSON body Telegram would send for this error."""
        body: JsonDict = {"ok": False, "error_code": self.error_code, "description": self.description}
        parameters: JsonDict = {}
        if self.retry_after is not None:
            parameters["retry_after"] = self.retry_after
        if self.migrate_to_chat_id is not None:
            parameters["migrate_to_chat_id"] = self.migrate_to_chat_id
        if parameters:
            body["parameters"] = parameters
        return body


# Bots may download files up to 20 MB through getFile (a local Bot API server lifts the limit).
BOT_DOWNLOAD_LIMIT_BYTES = 20 * 1024 * 1024
# How long a test waits for the bot before it fails. A wait ends as soon as what it waits for happens, so
# only a failing test waits this long; it is long because on a busy machine running the suite's workers
# side by side a healthy reply can take several seconds.
WAIT_SECONDS = 30.0


def _bad_request(detail: str) -> BotApiError:
    return BotApiError(400, f"Bad Request: {detail}")


# What Telegram answers to any call that names a basic group since upgraded to a supergroup.
GROUP_UPGRADED = "group chat was upgraded to a supergroup chat"
# What Telegram answers to a message sent to a forum topic closed to the bot (no admin there), and to one
# sent to a topic deleted (or never opened); a deleted topic is also refused as "TOPIC_DELETED".
TOPIC_CLOSED = "TOPIC_CLOSED"
TOPIC_NOT_FOUND = "message thread not found"
# What Telegram answers to a message for a chat that takes none from the bot (`FakeTelegram.refuse_chat`).
BOT_BLOCKED = "Forbidden: bot was blocked by the user"
USER_DEACTIVATED = "Forbidden: user is deactivated"
BOT_KICKED = "Forbidden: bot was kicked from the group chat"
CHAT_NOT_FOUND = "Bad Request: chat not found"


class _DropConnection(Exception):
    """Internal: close the client's socket without any answer."""


class _ClientGone(Exception):
    """Internal: the client closed its connection before the call arrived (already logged)."""


# --------------------------------------------------------------------------------------------
# Text formatting (HTML parse mode, entities) with Telegram's rules
# --------------------------------------------------------------------------------------------


class EntityParseError(ValueError):
    """Raised by `parse_html` with the message Telegram puts after "can't parse entities: "."""


@dataclass(frozen=True)
class FormattedText:
    """Text as Telegram stores it: plain text plus message entities (UTF-16 offsets)."""

    text: str
    entities: list[JsonDict]


_HTML_TAGS: Final = frozenset(
    {
        "a", "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
        "tg-emoji", "pre", "code", "blockquote",
    }
)  # fmt: skip
_SIMPLE_TAG_ENTITIES: Final = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
    "del": "strikethrough", "tg-spoiler": "spoiler", "span": "spoiler",
}  # fmt: skip
_ENTITY_TYPES: Final = frozenset(
    {
        "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold",
        "italic", "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote",
        "code", "pre", "text_link", "text_mention", "custom_emoji", "date_time",
    }
)  # fmt: skip
_SPACES: Final = " \t\r\n\v\f"


@dataclass
class _OpenTag:
    name: str
    argument: str
    utf16_offset: int
    text_start: int  # index into the output characters, for <a> without href
    expandable: bool = False


class _HtmlParser:
    """A port of tdlib's `parse_html`: same accepted syntax, same error messages."""

    def __init__(self, source: str, *, strict_ampersand: bool) -> None:
        self._src = source
        self._pos = 0
        self._strict_ampersand = strict_ampersand
        self._out: list[str] = []
        self._utf16 = 0
        self._stack: list[_OpenTag] = []
        self._entities: list[JsonDict] = []

    def parse(self) -> FormattedText:
        src = self._src
        while self._pos < len(src):
            char = src[self._pos]
            if char == "&":
                self._ampersand()
            elif char == "<":
                if self._peek(1) == "/":
                    self._end_tag()
                else:
                    self._start_tag()
            else:
                self._emit(char)
                self._pos += 1
        if self._stack:
            raise EntityParseError(f"Can't find end tag corresponding to start tag {self._stack[-1].name}")
        for entity in self._entities:
            if entity["type"] == "code":
                entity.pop("language", None)  # a language survives only on a <pre> entity
        self._entities.sort(key=lambda e: (e["offset"], -e["length"]))
        return FormattedText("".join(self._out), self._entities)

    # -- helpers ---------------------------------------------------------------------------
    def _peek(self, ahead: int = 0) -> str:
        index = self._pos + ahead
        return self._src[index] if index < len(self._src) else ""

    def _byte_offset(self, index: int) -> int:
        return len(self._src[:index].encode("utf-8"))

    def _emit(self, text: str) -> None:
        self._out.append(text)
        self._utf16 += utf16_len(text)

    def _skip_spaces(self) -> None:
        while self._peek() and self._peek() in _SPACES:
            self._pos += 1

    def _ampersand(self) -> None:
        decoded, end = _decode_html_entity(self._src, self._pos)
        if decoded is None:
            if self._strict_ampersand:
                raise EntityParseError(
                    f"Character '&' at byte offset {self._byte_offset(self._pos)} does not start a "
                    "supported HTML entity; escape it as &amp; (strict check of the fake: real "
                    "Telegram keeps such a '&' as is)"
                )
            self._emit("&")
            self._pos += 1
            return
        self._emit(decoded)
        self._pos = end

    # -- tags ------------------------------------------------------------------------------
    def _start_tag(self) -> None:
        begin = self._pos
        at = self._byte_offset(begin)
        self._pos += 1
        while self._peek() and self._peek() not in _SPACES and self._peek() != ">":
            self._pos += 1
        if not self._peek():
            raise EntityParseError(f"Unclosed start tag at byte offset {at}")
        name = self._src[begin + 1 : self._pos].lower()
        if name not in _HTML_TAGS:
            raise EntityParseError(f'Unsupported start tag "{name}" at byte offset {at}')
        tag = _OpenTag(name, "", self._utf16, len(self._out))
        while self._peek() != ">":
            self._skip_spaces()
            if self._peek() == ">":
                break
            attr_name, attr_value = self._attribute(name, at)
            self._apply_attribute(tag, attr_name, attr_value)
        self._pos += 1  # '>'
        if name == "span" and tag.argument != "spoiler":
            raise EntityParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {at}')
        self._stack.append(tag)

    def _attribute(self, tag_name: str, at: int) -> tuple[str, str | None]:
        start = self._pos
        while self._peek() and self._peek() not in _SPACES and self._peek() not in "=>":
            self._pos += 1
        attr_name = self._src[start : self._pos].lower()
        if not attr_name:
            if not self._peek():
                raise EntityParseError(f"Unclosed start tag at byte offset {at}")
            raise EntityParseError(f'Empty attribute name in the tag "{tag_name}" at byte offset {at}')
        self._skip_spaces()
        if self._peek() != "=":
            if tag_name == "blockquote" and attr_name == "expandable" and self._peek():
                return attr_name, None  # the only value-less attribute Telegram accepts
            if not self._peek():
                raise EntityParseError(f"Unclosed start tag at byte offset {at}")
            raise EntityParseError(
                f'Expected equal sign in declaration of an attribute of the tag "{tag_name}" at byte offset {at}'
            )
        self._pos += 1
        self._skip_spaces()
        if not self._peek():
            raise EntityParseError(f'Unclosed start tag "{tag_name}" at byte offset {at}')
        quote = self._peek()
        if quote in "'\"":
            value = self._quoted_value(quote)
        else:
            token_start = self._pos
            while self._peek() and (self._peek().isalnum() or self._peek() in ".-"):
                self._pos += 1
            value = self._src[token_start : self._pos].lower()
            if self._peek() and self._peek() not in _SPACES and self._peek() != ">":
                raise EntityParseError(f"Unexpected end of name token at byte offset {self._byte_offset(token_start)}")
        if not self._peek():
            raise EntityParseError(f"Unclosed start tag at byte offset {at}")
        return attr_name, value

    def _quoted_value(self, quote: str) -> str:
        self._pos += 1
        chars: list[str] = []
        while self._peek() and self._peek() != quote:
            if self._peek() == "&":
                decoded, end = _decode_html_entity(self._src, self._pos)
                if decoded is not None:
                    chars.append(decoded)
                    self._pos = end
                    continue
            chars.append(self._peek())
            self._pos += 1
        if self._peek() == quote:
            self._pos += 1
        return "".join(chars)

    @staticmethod
    def _apply_attribute(tag: _OpenTag, name: str, value: str | None) -> None:
        if value is None:
            tag.expandable = True
        elif tag.name == "a" and name == "href":
            tag.argument = value
        elif tag.name == "code" and name == "class" and value.startswith("language-"):
            tag.argument = value[len("language-") :]
        elif tag.name == "span" and name == "class" and value.startswith("tg-"):
            tag.argument = value[len("tg-") :]
        elif tag.name == "tg-emoji" and name == "emoji-id":
            tag.argument = value

    def _end_tag(self) -> None:
        begin = self._pos
        at = self._byte_offset(begin)
        if not self._stack:
            raise EntityParseError(f"Unexpected end tag at byte offset {at}")
        self._pos += 2
        while self._peek() and self._peek() not in _SPACES and self._peek() != ">":
            self._pos += 1
        end_name = self._src[begin + 2 : self._pos].lower()
        self._skip_spaces()
        if self._peek() != ">":
            raise EntityParseError(f"Unclosed end tag at byte offset {at}")
        self._pos += 1
        tag = self._stack[-1]
        if end_name and end_name != tag.name:
            raise EntityParseError(
                f'Unmatched end tag at byte offset {at}, expected "</{tag.name}>", found "</{end_name}>"'
            )
        self._stack.pop()
        self._close_entity(tag)

    def _close_entity(self, tag: _OpenTag) -> None:
        length = self._utf16 - tag.utf16_offset
        if length <= 0:
            return
        entity: JsonDict = {"offset": tag.utf16_offset, "length": length}
        last = self._entities[-1] if self._entities else None
        same_span = last is not None and (last["offset"], last["length"]) == (tag.utf16_offset, length)
        if tag.name in _SIMPLE_TAG_ENTITIES:
            entity["type"] = _SIMPLE_TAG_ENTITIES[tag.name]
        elif tag.name == "tg-emoji":
            if not tag.argument.isdigit() or int(tag.argument) == 0:
                raise EntityParseError("Invalid custom emoji identifier specified")
            entity.update(type="custom_emoji", custom_emoji_id=tag.argument)
        elif tag.name == "a":
            url = tag.argument or "".join(self._out[tag.text_start :])
            if not url:
                return
            entity.update(type="text_link", url=url)
        elif tag.name == "pre":
            if last is not None and same_span and last["type"] == "code" and last.get("language"):
                last["type"] = "pre"
                return
            entity["type"] = "pre"
        elif tag.name == "code":
            if last is not None and same_span and last["type"] == "pre" and tag.argument:
                last["language"] = tag.argument
                return
            entity["type"] = "code"
            if tag.argument:
                entity["language"] = tag.argument  # kept only if an enclosing <pre> claims it
        else:  # blockquote
            entity["type"] = "expandable_blockquote" if tag.expandable else "blockquote"
        self._entities.append(entity)


def _decode_html_entity(text: str, pos: int) -> tuple[str | None, int]:
    """Decode the HTML entity at text[pos] == '&' the way tdlib does; (None, pos) if it isn't one."""
    end = pos + 1
    if text[end : end + 1] == "#":
        end += 1
        hexadecimal = text[end : end + 1] == "x"
        if hexadecimal:
            end += 1
        digits_start = end
        allowed = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
        while end < len(text) and text[end] in allowed:
            end += 1
        digits = text[digits_start:end]
        code = int(digits, 16 if hexadecimal else 10) if digits else 0
        if code == 0 or code >= 0x10FFFF or end - pos >= 10 or 0xD800 <= code <= 0xDFFF:
            return None, pos
        decoded = chr(code)
    else:
        while end < len(text) and text[end].isascii() and text[end].isalpha():
            end += 1
        named = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}.get(text[pos + 1 : end])
        if named is None:
            return None, pos
        decoded = named
    if text[end : end + 1] == ";":
        end += 1
    return decoded, end


def parse_html(source: str, *, strict_ampersand: bool = True) -> FormattedText:
    """Parse Telegram-flavoured HTML into plain text + entities, raising `EntityParseError`.

    `strict_ampersand=True` (the fake's default) also rejects a bare '&' that does not start a
    supported entity (&lt; &gt; &amp; &quot; &#N; &#xN;); real Telegram keeps such a '&' as is.
    """
    return _HtmlParser(source, strict_ampersand=strict_ampersand).parse()


def _validate_entities(text: str, entities: Any) -> list[JsonDict]:
    if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
        raise _bad_request("can't parse entities JSON object")
    total = utf16_len(text)
    checked: list[JsonDict] = []
    for entity in entities:
        kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
        if kind not in _ENTITY_TYPES:
            raise _bad_request(f"can't parse MessageEntity: unsupported entity type {kind!r}")
        if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
            raise _bad_request("can't parse MessageEntity: wrong offset or length")
        if offset > total:
            raise _bad_request(
                f"can't parse entities: Entity begins after the end of the text at UTF-16 offset {offset}"
            )
        if offset + length > total:
            raise _bad_request(
                f"can't parse entities: Entity beginning at UTF-16 offset {offset} ends after the end "
                f"of the text at UTF-16 offset {offset + length}"
            )
        if kind == "text_link" and not entity.get("url"):
            raise _bad_request('can\'t parse MessageEntity: field "url" must be non-empty')
        if length:
            checked.append(dict(entity))
    return checked


def _trim(formatted: FormattedText) -> FormattedText:
    """Strip leading/trailing spaces and newlines like Telegram, keeping entities aligned."""
    text = formatted.text
    core = text.strip(" \n")
    if core == text:
        return formatted
    lead = utf16_len(text[: len(text) - len(text.lstrip(" \n"))])
    end = lead + utf16_len(core)
    entities: list[JsonDict] = []
    for entity in formatted.entities:
        start, stop = max(entity["offset"], lead), min(entity["offset"] + entity["length"], end)
        if stop > start:
            entities.append({**entity, "offset": start - lead, "length": stop - start})
    return FormattedText(core, entities)


def format_text(
    text: Any,
    parse_mode: Any = None,
    entities: Any = None,
    *,
    allow_empty: bool = False,
    strict_ampersand: bool = True,
) -> FormattedText:
    """Validate and render a message text exactly as sendMessage/editMessageText do.

    Raises `BotApiError` 400 with Telegram's descriptions: "message text is empty",
    "message is too long", "can't parse entities: ...", "unsupported parse_mode".
    """
    raw = "" if text is None else str(text)
    if entities is not None:
        formatted = FormattedText(raw, _validate_entities(raw, entities))
    elif parse_mode in (None, ""):
        formatted = FormattedText(raw, [])
    else:
        mode = str(parse_mode).lower()
        if mode == "html":
            try:
                formatted = parse_html(raw, strict_ampersand=strict_ampersand)
            except EntityParseError as exc:
                raise _bad_request(f"can't parse entities: {exc}") from exc
        elif mode in ("markdown", "markdownv2"):
            formatted = FormattedText(raw, [])  # not validated by the fake
        else:
            raise _bad_request("unsupported parse_mode")
    formatted = _trim(formatted)
    if not formatted.text and not allow_empty:
        raise _bad_request("message text is empty")
    if utf16_len(formatted.text) > MAX_TEXT_LENGTH:
        raise _bad_request("message is too long")
    return formatted


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

FaultKind = Literal[
    "rate_limit", "server_error", "cant_parse_entities", "too_long", "drop_connection", "timeout", "slow"
]


@dataclass(frozen=True)
class Fault:
    """A failure the fake injects into one matching call; build it with the classmethods."""

    kind: FaultKind
    retry_after: int = 1
    status: int = 502
    html_body: bool = False
    seconds: float = 0.0
    apply: bool = False

    @classmethod
    def rate_limit(cls, retry_after: int = 1) -> Fault:
        """429 "Too Many Requests: retry after N" with parameters.retry_after = N."""
        return cls("rate_limit", retry_after=retry_after)

    @classmethod
    def server_error(cls, status: int = 502, *, html_body: bool = False) -> Fault:
        """A 5xx answer; JSON like the Bot API, or (html_body=True) nginx's HTML error page."""
        return cls("server_error", status=status, html_body=html_body)

    @classmethod
    def cant_parse_entities(cls) -> Fault:
        """400 "Bad Request: can't parse entities: ..." whatever the text."""
        return cls("cant_parse_entities")

    @classmethod
    def too_long(cls) -> Fault:
        """400 "Bad Request: message is too long" whatever the text."""
        return cls("too_long")

    @classmethod
    def drop_connection(cls) -> Fault:
        """Close the socket without answering (the call is not applied)."""
        return cls("drop_connection")

    @classmethod
    def timeout(cls, seconds: float, *, apply: bool = False) -> Fault:
        """A slow answer: hold the request `seconds` before answering.

        apply=False: the call is lost; after the delay the connection is closed unanswered.
        apply=True: the call IS applied at once (e.g. the message is really sent and recorded),
        then the normal answer is held back `seconds` - so a client with a shorter timeout
        believes it failed although it succeeded, which is what makes retries duplicate.
        """
        return cls("timeout", seconds=seconds, apply=apply)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """A slow way in: the call takes `seconds` to arrive, then is applied and answered as usual. A
        client that went away meanwhile (a killed bot) never got it through: not applied, status 499."""
        return cls("slow", seconds=seconds, apply=True)

    @classmethod
    def named(cls, kind: str, **options: Any) -> Fault:
        """Build a fault from its kind name, e.g. ``Fault.named("rate_limit", retry_after=3)``."""
        factories: dict[str, Callable[..., Fault]] = {
            "rate_limit": cls.rate_limit,
            "server_error": cls.server_error,
            "cant_parse_entities": cls.cant_parse_entities,
            "too_long": cls.too_long,
            "drop_connection": cls.drop_connection,
            "timeout": cls.timeout,
            "slow": cls.slow,
        }
        if kind not in factories:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {sorted(factories)}")
        return factories[kind](**options)


@dataclass
class _ArmedFault:
    method: str  # lower-case method name or "*"
    fault: Fault
    remaining: int


class _FaultPlan:
    """Faults waiting for their calls, plus the "server is down" switch. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[_ArmedFault] = []
        self._outage: Fault | None = None

    def arm(self, method: str, fault: Fault, times: int) -> None:
        with self._lock:
            self._armed.append(_ArmedFault(method.lower(), fault, times))

    def take(self, method: str) -> Fault | None:
        with self._lock:
            for armed in self._armed:
                if armed.method in (method.lower(), "*"):
                    armed.remaining -= 1
                    if armed.remaining <= 0:
                        self._armed.remove(armed)
                    return armed.fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    @property
    def outage(self) -> Fault | None:
        return self._outage

    @outage.setter
    def outage(self, fault: Fault | None) -> None:
        self._outage = fault


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UploadedFile:
    """A file part of a multipart request, as recorded in `RecordedCall.params`."""

    filename: str | None
    content_type: str
    data: bytes


@dataclass
class RecordedCall:
    """One request the bot made: method, decoded params, arrival time and how it was answered.

    `status` is the HTTP status sent back (None while in flight or when the connection was
    dropped), `result` the "result" of a successful answer, `error` the error description,
    `fault` the name of the injected fault that hit this call, if any.
    """

    method: str
    params: JsonDict
    time: float
    status: int | None = None
    result: Any = None
    error: str | None = None
    fault: str | None = None

    @property
    def ok(self) -> bool:
        """True when the call was answered with success (and so took effect)."""
        return self.status == 200


@dataclass(frozen=True)
class SentMessage:
    """A successful sendMessage call: what the bot sent (raw text as sent) and the id it got."""

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    entities: list[JsonDict] | None
    reply_markup: JsonDict | None
    time: float
    params: JsonDict
    # The forum topic it was sent to (`message_thread_id`); None: the chat itself, or a forum's General topic.
    thread_id: int | None = None


@dataclass(frozen=True)
class EditRecord:
    """A successful editMessageText call."""

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    entities: list[JsonDict] | None
    time: float


@dataclass(frozen=True)
class DraftRecord:
    """A successful sendMessageDraft call (a streamed, ephemeral preview in a private chat)."""

    chat_id: int
    draft_id: int
    text: str
    parse_mode: str | None
    time: float


class _CallLog:
    """Thread-safe list of recorded calls with a condition variable for waiters."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self._calls: list[RecordedCall] = []

    def start(self, method: str, params: JsonDict) -> RecordedCall:
        call = RecordedCall(method, params, time.time())
        with self.condition:
            self._calls.append(call)
            self.condition.notify_all()
        return call

    def finish(
        self,
        call: RecordedCall,
        *,
        status: int | None,
        result: Any = None,
        error: str | None = None,
        fault: str | None = None,
    ) -> None:
        with self.condition:
            call.status, call.result, call.error = status, result, error
            call.fault = fault or call.fault
            self.condition.notify_all()

    def snapshot(self) -> list[RecordedCall]:
        with self.condition:
            return list(self._calls)

    def clear(self) -> None:
        with self.condition:
            self._calls.clear()


# --------------------------------------------------------------------------------------------
# Chats, messages, updates, files
# --------------------------------------------------------------------------------------------


@dataclass
class _StoredMessage:
    chat_id: int
    message_id: int
    from_bot: bool
    payload: JsonDict  # the Message object as Telegram sends it
    deleted: bool = False


@dataclass
class _PendingUpdate:
    update: JsonDict
    forced: bool = False  # redelivered: returned once even if the offset already passed it


@dataclass(frozen=True)
class _StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    content: bytes


def _guess_chat_type(chat_id: int) -> str:
    if chat_id > 0:
        return "private"
    return "supergroup" if str(chat_id).startswith("-100") else "group"


def _update_type(update: Mapping[str, Any]) -> str:
    return next((key for key in update if key != "update_id"), "")


class _UpdateQueue:
    """Updates waiting for getUpdates, with Telegram's offset acknowledgement. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(_FIRST_UPDATE_ID)
        self._pending: dict[int, _PendingUpdate] = {}
        self._history: dict[int, JsonDict] = {}
        self._allowed: list[str] | None = None

    def push(self, update: JsonDict) -> int:
        with self._lock:
            if "update_id" not in update:
                update = {"update_id": next(self._ids), **update}
            update_id = int(update["update_id"])
            self._history[update_id] = copy.deepcopy(update)
            self._pending[update_id] = _PendingUpdate(copy.deepcopy(update))
            return update_id

    def redeliver(self, update_id: int) -> None:
        with self._lock:
            if update_id not in self._history:
                raise KeyError(f"no update {update_id} was ever pushed")
            self._pending[update_id] = _PendingUpdate(copy.deepcopy(self._history[update_id]), forced=True)

    def get(self, update_id: int) -> JsonDict:
        with self._lock:
            return copy.deepcopy(self._history[update_id])

    def set_allowed(self, allowed: list[str] | None) -> None:
        with self._lock:
            self._allowed = allowed or None

    def acknowledge(self, offset: int) -> None:
        """Forget updates below a positive offset; keep only the last -offset for a negative one."""
        with self._lock:
            if offset < 0:
                keep = sorted(self._pending)[offset:]
                self._pending = {uid: self._pending[uid] for uid in keep}
            elif offset > 0:
                self._pending = {uid: item for uid, item in self._pending.items() if uid >= offset or item.forced}

    def take(self, offset: int, limit: int) -> list[JsonDict]:
        """The next updates to deliver (they stay pending until acknowledged by an offset)."""
        with self._lock:
            out: list[JsonDict] = []
            for uid in sorted(self._pending):
                item = self._pending[uid]
                if uid < offset and not item.forced:
                    continue
                if self._allowed is not None and _update_type(item.update) not in self._allowed:
                    del self._pending[uid]  # Telegram never stores updates of unwanted types
                    continue
                item.forced = False
                out.append(copy.deepcopy(item.update))
                if len(out) >= limit:
                    break
            return out

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


class _World:
    """Chats, users, messages (with per-chat ids) and files the fake knows about. Thread-safe."""

    def __init__(self, bot_user: JsonDict) -> None:
        self.lock = threading.RLock()
        self.bot_user = bot_user
        self._chats: dict[int, JsonDict] = {}
        self._users: dict[int, JsonDict] = {}
        self._next_id: dict[int, int] = {}
        self._messages: dict[tuple[int, int], _StoredMessage] = {}
        # A forum's topics: the id of each (its opening service message's id, as Telegram numbers them).
        self._topics: dict[int, set[int]] = {}
        # Topics closed (the bot may not post there), and deleted ones with what a send to them is answered.
        self._closed_topics: set[tuple[int, int]] = set()
        self._deleted_topics: dict[tuple[int, int], str] = {}
        self._files: dict[str, _StoredFile] = {}
        self._file_seq = itertools.count(1)
        # Basic groups upgraded to supergroups: the old id, the new one.
        self.migrated: dict[int, int] = {}
        # Chats that take no message from the bot (blocked, deactivated, kicked, gone), with Telegram's answer.
        self.refusing: dict[int, tuple[int, str]] = {}

    # chats and users
    def chat(self, chat_id: int, chat_type: str | None = None, user: JsonDict | None = None) -> JsonDict:
        """The Chat object for `chat_id`, created on first use (type guessed from the id's sign)."""
        with self.lock:
            chat = self._chats.get(chat_id)
            if chat is None or chat_type not in (None, chat["type"]):
                kind = chat_type or _guess_chat_type(chat_id)
                chat = {"id": chat_id, "type": kind}
                if kind == "private":
                    chat["first_name"] = "User"
                else:
                    chat["title"] = f"Test {kind} {chat_id}"
                self._chats[chat_id] = chat
            if user is not None and chat["type"] == "private":
                chat["first_name"] = user.get("first_name", "User")
                if user.get("username"):
                    chat["username"] = user["username"]
            return dict(chat)

    def user(self, user_id: int, username: str | None = None, first_name: str | None = None) -> JsonDict:
        with self.lock:
            user = self._users.setdefault(
                user_id,
                {"id": user_id, "is_bot": False, "first_name": f"User{user_id}", "language_code": "en"},
            )
            if username is not None:
                user["username"] = username
            if first_name is not None:
                user["first_name"] = first_name
            return dict(user)

    # forum topics
    def open_topic(self, chat_id: int, name: str, creator: JsonDict) -> int:
        """Make `chat_id` a forum supergroup and open a topic in it; returns the topic's id
        (`message_thread_id`), the id of the `forum_topic_created` service message that opens it."""
        with self.lock:
            chat = self._chats.get(chat_id) or {"id": chat_id, "type": "supergroup", "title": f"Forum {chat_id}"}
            chat["is_forum"] = True
            self._chats[chat_id] = chat
            opening = self.new_message(
                chat_id,
                creator.get("id") == self.bot_user["id"],
                {"from": creator, "chat": dict(chat), "date": int(time.time()), "is_topic_message": True,
                 "forum_topic_created": {"name": name, "icon_color": 7322096}},
            )  # fmt: skip
            thread_id = int(opening["message_id"])
            self._messages[(chat_id, thread_id)].payload["message_thread_id"] = thread_id
            self._topics.setdefault(chat_id, set()).add(thread_id)
            return thread_id

    def topic_opening(self, chat_id: int, thread_id: int) -> JsonDict:
        """The service message that opened a topic (what Telegram gives as `reply_to_message` of a topic's
        messages that reply to none); a topic the chat does not have is refused as Telegram does."""
        with self.lock:
            if thread_id not in self._topics.get(chat_id, set()):
                raise _bad_request(self._deleted_topics.get((chat_id, thread_id), TOPIC_NOT_FOUND))
            return copy.deepcopy(self._messages[(chat_id, thread_id)].payload)

    def close_topic(self, chat_id: int, thread_id: int) -> None:
        """Close a topic: its messages stay, and the bot, no admin, may post there no more."""
        with self.lock:
            self.topic_opening(chat_id, thread_id)
            self._closed_topics.add((chat_id, thread_id))

    def topic_closed(self, chat_id: int, thread_id: int) -> bool:
        with self.lock:
            return (chat_id, thread_id) in self._closed_topics

    def delete_topic(self, chat_id: int, thread_id: int, answer: str) -> None:
        """Delete a topic with all its messages; a send to it is answered 400 `answer`."""
        with self.lock:
            self.topic_opening(chat_id, thread_id)
            self._topics[chat_id].discard(thread_id)
            self._closed_topics.discard((chat_id, thread_id))
            self._deleted_topics[(chat_id, thread_id)] = answer
            for (cid, message_id), stored in self._messages.items():
                if cid == chat_id and (message_id == thread_id or stored.payload.get("message_thread_id") == thread_id):
                    stored.deleted = True

    # messages
    def new_message(self, chat_id: int, from_bot: bool, payload: JsonDict) -> JsonDict:
        """Give `payload` the chat's next message id, store it and return a copy."""
        with self.lock:
            message_id = self._next_id.get(chat_id, 1)
            self._next_id[chat_id] = message_id + 1
            payload = {"message_id": message_id, **payload}
            self._messages[(chat_id, message_id)] = _StoredMessage(chat_id, message_id, from_bot, payload)
            return copy.deepcopy(payload)

    def message(self, chat_id: int, message_id: int) -> _StoredMessage | None:
        with self.lock:
            stored = self._messages.get((chat_id, message_id))
            return None if stored is None or stored.deleted else stored

    def messages(self, chat_id: int, *, from_bot: bool) -> list[_StoredMessage]:
        with self.lock:
            found = [
                m for (cid, _), m in self._messages.items()
                if cid == chat_id and m.from_bot == from_bot and not m.deleted
            ]  # fmt: skip
            return sorted(found, key=lambda m: m.message_id)

    # files
    def add_file(self, content: bytes, file_name: str, folder: str) -> _StoredFile:
        with self.lock:
            seq = next(self._file_seq)
            stored = _StoredFile(
                file_id=f"FAKEFILE{seq:06d}",
                file_unique_id=f"FAKEUNIQ{seq:06d}",
                file_path=f"{folder}/file_{seq}_{file_name}",
                content=content,
            )
            self._files[stored.file_id] = stored
            return stored

    def file(self, file_id: str) -> _StoredFile | None:
        with self.lock:
            return self._files.get(file_id)

    def file_by_path(self, path: str) -> _StoredFile | None:
        with self.lock:
            return next((f for f in self._files.values() if f.file_path == path), None)


_BOT_COMMAND_RE: Final = re.compile(r"(?<![\w/])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/])")
_MENTION_RE: Final = re.compile(r"(?<![\w@/])@[A-Za-z][A-Za-z0-9_]{4,31}(?!\w)")


def detect_entities(text: str) -> list[JsonDict]:
    """The entities Telegram adds to an incoming text: bot_command and mention (UTF-16 offsets)."""
    found: list[JsonDict] = []
    command_spans: list[tuple[int, int]] = []
    for match in _BOT_COMMAND_RE.finditer(text):
        command_spans.append(match.span())
        found.append(_entity("bot_command", text, *match.span()))
    for match in _MENTION_RE.finditer(text):
        if not any(start <= match.start() < end for start, end in command_spans):
            found.append(_entity("mention", text, *match.span()))
    return sorted(found, key=lambda e: e["offset"])


def _entity(kind: str, text: str, start: int, end: int) -> JsonDict:
    return {"type": kind, "offset": utf16_len(text[:start]), "length": utf16_len(text[start:end])}


# --------------------------------------------------------------------------------------------
# Request decoding
# --------------------------------------------------------------------------------------------

_JSON_PARAMS: Final = frozenset(
    {
        "reply_markup", "entities", "caption_entities", "commands", "allowed_updates", "scope",
        "link_preview_options", "reply_parameters", "media", "results", "options", "permissions",
        "menu_button", "message_ids", "reaction", "explanation_entities", "question_entities",
        "text_entities", "button", "rights",
    }
)  # fmt: skip
_STRING_ID_PARAMS: Final = frozenset(
    {
        "callback_query_id", "inline_message_id", "file_id", "custom_emoji_id", "inline_query_id",
        "shipping_query_id", "pre_checkout_query_id", "web_app_query_id", "business_connection_id",
        "secret_token", "ip_address",
    }
)  # fmt: skip
_INT_PARAMS: Final = frozenset({"offset", "limit", "timeout", "max_connections", "cache_time", "duration"})
_BOOL_PREFIXES: Final = ("disable_", "is_", "has_", "protect_", "show_", "drop_", "allow_", "can_", "supports_")
_INT_RE: Final = re.compile(r"-?\d{1,20}")


def _coerce_param(name: str, value: Any) -> Any:
    """Turn a form field (always a string) back into what the client meant."""
    if not isinstance(value, str):
        return value
    if name in _JSON_PARAMS:
        try:
            return json.loads(value)
        except ValueError:
            return value
    if name not in _STRING_ID_PARAMS and (name.endswith("_id") or name in _INT_PARAMS):
        return int(value) if _INT_RE.fullmatch(value) else value
    if name.startswith(_BOOL_PREFIXES) and value in ("true", "false", "True", "False"):
        return value.lower() == "true"
    return value


async def _read_params(request: web.Request) -> JsonDict:
    """Decode query string + urlencoded / multipart / JSON body into one params dict."""
    params: JsonDict = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        else:
            form = await request.post()
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    params[name] = UploadedFile(value.filename, value.content_type, value.file.read())
                else:
                    params[name] = value
    return {name: _coerce_param(name, value) for name, value in params.items()}


def _ok(result: Any, description: str | None = None) -> JsonDict:
    body: JsonDict = {"ok": True, "result": result}
    if description:
        body["description"] = description
    return body


def _json_safe(params: Mapping[str, Any]) -> JsonDict:
    return {k: v for k, v in params.items() if not isinstance(v, UploadedFile)}


# --------------------------------------------------------------------------------------------
# Bot API method implementations
# --------------------------------------------------------------------------------------------

_CHAT_ACTIONS: Final = frozenset(
    {
        "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
        "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
    }
)  # fmt: skip
_COMMAND_RE: Final = re.compile(r"[a-z0-9_]{1,32}")

SyncMethod = Callable[[JsonDict], Any]


@dataclass
class _Webhook:
    url: str = ""
    secret_token: str | None = None
    max_connections: int | None = None
    allowed_updates: list[str] | None = None


class _BotApi:
    """The synchronous Bot API methods (everything but the long-polling getUpdates)."""

    def __init__(self, world: _World, queue: _UpdateQueue, *, strict_ampersand: bool) -> None:
        self.world = world
        self.queue = queue
        self.webhook = _Webhook()
        self.strict_ampersand = strict_ampersand
        self.commands: dict[tuple[str, str], list[JsonDict]] = {}
        self.callback_ids: set[str] = set()
        self.on_webhook_change: Callable[[], None] = lambda: None
        self.methods: dict[str, SyncMethod] = {
            "getMe": self.get_me,
            "sendMessage": self.send_message,
            "sendDocument": self.send_document,
            "editMessageText": self.edit_message_text,
            "deleteMessage": self.delete_message,
            "sendChatAction": self.send_chat_action,
            "sendMessageDraft": self.send_message_draft,
            "setMyCommands": self.set_my_commands,
            "getMyCommands": self.get_my_commands,
            "deleteMyCommands": self.delete_my_commands,
            "answerCallbackQuery": self.answer_callback_query,
            "setWebhook": self.set_webhook,
            "deleteWebhook": self.delete_webhook,
            "getWebhookInfo": self.get_webhook_info,
            "getFile": self.get_file,
            "close": lambda _params: True,
            "logOut": lambda _params: True,
        }

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _chat_id(params: JsonDict) -> int:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _bad_request("chat_id is empty")
        if not isinstance(chat_id, int):
            raise _bad_request("chat not found")
        return chat_id

    def _open_chat_id(self, params: JsonDict) -> int:
        """The chat a call acts in; a group upgraded to a supergroup answers 400 with its new id, a chat that
        takes no message from the bot as Telegram does (`FakeTelegram.refuse_chat`)."""
        chat_id = self._chat_id(params)
        with self.world.lock:
            moved_to = self.world.migrated.get(chat_id)
            refusal = self.world.refusing.get(chat_id)
        if refusal is not None:
            raise BotApiError(*refusal)
        if moved_to is not None:
            raise BotApiError(400, f"Bad Request: {GROUP_UPGRADED}", migrate_to_chat_id=moved_to)
        return chat_id

    def _in_topic(self, chat_id: int, params: JsonDict, *, posting: bool = True) -> JsonDict:
        """The fields a message sent with `message_thread_id` gets (none without one); a topic the chat
        does not have, or one closed to the bot when it posts there, is refused as Telegram does."""
        thread_id = params.get("message_thread_id")
        if thread_id is None:
            return {}
        if not isinstance(thread_id, int):
            raise _bad_request(TOPIC_NOT_FOUND)
        self.world.topic_opening(chat_id, thread_id)
        if posting and self.world.topic_closed(chat_id, thread_id):
            raise _bad_request(TOPIC_CLOSED)
        return {"message_thread_id": thread_id, "is_topic_message": True}

    def _format(self, params: JsonDict, *, allow_empty: bool = False) -> FormattedText:
        return format_text(
            params.get("text"),
            params.get("parse_mode"),
            params.get("entities"),
            allow_empty=allow_empty,
            strict_ampersand=self.strict_ampersand,
        )

    # -- methods ---------------------------------------------------------------------------
    def get_me(self, _params: JsonDict) -> JsonDict:
        return {
            **self.world.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    def send_message(self, params: JsonDict) -> JsonDict:
        chat_id = self._open_chat_id(params)
        formatted = self._format(params)
        payload: JsonDict = {
            "from": dict(self.world.bot_user),
            "chat": self.world.chat(chat_id),
            "date": int(time.time()),
            **self._in_topic(chat_id, params),
            "text": formatted.text,
        }
        if formatted.entities:
            payload["entities"] = formatted.entities
        markup = params.get("reply_markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            payload["reply_markup"] = markup
        reply_to = self._reply_target(chat_id, params)
        if reply_to is not None:
            payload["reply_to_message"] = reply_to
        return self.world.new_message(chat_id, True, payload)

    def send_document(self, params: JsonDict) -> JsonDict:
        """sendDocument with an uploaded file (multipart); a file_id or URL string is refused here."""
        chat_id = self._open_chat_id(params)
        upload = params.get("document")
        if isinstance(upload, str) and upload.startswith("attach://"):
            upload = params.get(upload.removeprefix("attach://"))  # the file in another multipart field
        if not isinstance(upload, UploadedFile):
            raise _bad_request("wrong remote file identifier specified: can't unserialize it. Wrong padding length")
        if not upload.data:
            raise _bad_request("file must be non-empty")
        topic = self._in_topic(chat_id, params)
        stored = self.world.add_file(upload.data, upload.filename or "document", "documents")
        payload: JsonDict = {
            "from": dict(self.world.bot_user),
            "chat": self.world.chat(chat_id),
            "date": int(time.time()),
            **topic,
            "document": {
                "file_id": stored.file_id,
                "file_unique_id": stored.file_unique_id,
                "file_name": upload.filename or "document",
                "mime_type": upload.content_type,
                "file_size": len(upload.data),
            },
        }
        caption = params.get("caption")
        if isinstance(caption, str) and caption:
            payload["caption"] = caption
        return self.world.new_message(chat_id, True, payload)

    def _reply_target(self, chat_id: int, params: JsonDict) -> JsonDict | None:
        reply = params.get("reply_parameters")
        message_id = reply.get("message_id") if isinstance(reply, dict) else params.get("reply_to_message_id")
        if not isinstance(message_id, int):
            return None
        stored = self.world.message(chat_id, message_id)
        if stored is None:
            allow = (reply or {}).get("allow_sending_without_reply") if isinstance(reply, dict) else None
            if allow or params.get("allow_sending_without_reply"):
                return None
            raise _bad_request("message to be replied not found")
        return {k: v for k, v in copy.deepcopy(stored.payload).items() if k != "reply_to_message"}

    def edit_message_text(self, params: JsonDict) -> JsonDict | bool:
        if params.get("inline_message_id"):
            self._format(params)
            return True
        chat_id = self._open_chat_id(params)
        message_id = params.get("message_id")
        if not isinstance(message_id, int):
            raise _bad_request("message identifier is not specified")
        formatted = self._format(params)
        markup = params.get("reply_markup")
        markup = markup if isinstance(markup, dict) and "inline_keyboard" in markup else None
        with self.world.lock:
            stored = self.world.message(chat_id, message_id)
            if stored is None:
                raise _bad_request("message to edit not found")
            if not stored.from_bot:
                raise _bad_request("message can't be edited")
            current = stored.payload
            if (
                current.get("text") == formatted.text
                and current.get("entities", []) == formatted.entities
                and current.get("reply_markup") == markup
            ):
                raise _bad_request(
                    "message is not modified: specified new message content and reply markup are "
                    "exactly the same as a current content and reply markup of the message"
                )
            current["text"] = formatted.text
            current["edit_date"] = int(time.time())
            for key, value in (("entities", formatted.entities), ("reply_markup", markup)):
                if value:
                    current[key] = value
                else:
                    current.pop(key, None)
            return copy.deepcopy(current)

    def delete_message(self, params: JsonDict) -> bool:
        chat_id = self._open_chat_id(params)
        message_id = params.get("message_id")
        with self.world.lock:
            stored = self.world.message(chat_id, message_id) if isinstance(message_id, int) else None
            if stored is None:
                raise _bad_request("message to delete not found")
            stored.deleted = True
        return True

    def send_chat_action(self, params: JsonDict) -> bool:
        self._in_topic(self._open_chat_id(params), params, posting=False)
        if params.get("action") not in _CHAT_ACTIONS:
            raise _bad_request("wrong parameter action in request")
        return True

    def send_message_draft(self, params: JsonDict) -> bool:
        chat_id = self._open_chat_id(params)
        if self.world.chat(chat_id)["type"] != "private":
            raise _bad_request("message drafts can be sent only to private chats")
        draft_id = params.get("draft_id")
        if not isinstance(draft_id, int) or draft_id == 0:
            raise _bad_request("draft_id must be a non-zero integer")
        self._format(params, allow_empty=True)
        return True

    @staticmethod
    def _commands_key(params: JsonDict) -> tuple[str, str]:
        scope = params.get("scope") or {"type": "default"}
        return json.dumps(scope, sort_keys=True), str(params.get("language_code") or "")

    def set_my_commands(self, params: JsonDict) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _bad_request("can't parse commands JSON object")
        for item in commands:
            if not isinstance(item, dict) or not _COMMAND_RE.fullmatch(str(item.get("command", ""))):
                raise _bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(item.get("description") or "")) <= 256:
                raise _bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        with self.world.lock:
            self.commands[self._commands_key(params)] = [
                {"command": c["command"], "description": c["description"]} for c in commands
            ]
        return True

    def get_my_commands(self, params: JsonDict) -> list[JsonDict]:
        with self.world.lock:
            return copy.deepcopy(self.commands.get(self._commands_key(params), []))

    def delete_my_commands(self, params: JsonDict) -> bool:
        with self.world.lock:
            self.commands.pop(self._commands_key(params), None)
        return True

    def answer_callback_query(self, params: JsonDict) -> bool:
        if str(params.get("callback_query_id")) not in self.callback_ids:
            raise _bad_request("query is too old and response timeout expired or query ID is invalid")
        return True

    def set_webhook(self, params: JsonDict) -> bool:
        url = str(params.get("url") or "")
        if url and not url.startswith(("http://", "https://")):
            raise _bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        if params.get("drop_pending_updates"):
            self.queue.clear()
        allowed = params.get("allowed_updates")
        self.webhook = _Webhook(
            url=url,
            secret_token=params.get("secret_token") or None,
            max_connections=params.get("max_connections"),
            allowed_updates=allowed if isinstance(allowed, list) else None,
        )
        self.on_webhook_change()
        return True

    def delete_webhook(self, params: JsonDict) -> bool:
        if params.get("drop_pending_updates"):
            self.queue.clear()
        self.webhook = _Webhook()
        return True

    def get_webhook_info(self, _params: JsonDict) -> JsonDict:
        hook = self.webhook
        info: JsonDict = {
            "url": hook.url,
            "has_custom_certificate": False,
            "pending_update_count": len(self.queue),
        }
        if hook.url:
            info["max_connections"] = hook.max_connections or 40
            info["ip_address"] = "127.0.0.1"
            if hook.allowed_updates:
                info["allowed_updates"] = hook.allowed_updates
        return info

    def get_file(self, params: JsonDict) -> JsonDict:
        stored = self.world.file(str(params.get("file_id") or ""))
        if stored is None:
            raise _bad_request("invalid file_id")
        if len(stored.content) > BOT_DOWNLOAD_LIMIT_BYTES:
            raise _bad_request("file is too big")  # what Telegram answers past the Bot API's 20 MB
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": len(stored.content),
            "file_path": stored.file_path,
        }


# --------------------------------------------------------------------------------------------
# The server's own thread and loop
# --------------------------------------------------------------------------------------------


class _LoopThread:
    """A daemon thread running an asyncio loop that hosts the aiohttp server."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-telegram", daemon=True)
        self._thread.start()
        ready.wait()
        self.loop = loop
        return loop

    def run(self, coro: Awaitable[_T], timeout: float = 10.0) -> _T:
        """Run `coro` on the server loop from another thread and return its result."""
        assert self.loop is not None, "the fake is not running"
        return asyncio.run_coroutine_threadsafe(_as_coroutine(coro), self.loop).result(timeout)

    def call_soon(self, callback: Callable[[], None]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if self._thread is threading.current_thread():
            callback()
        else:
            loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self.loop, self._thread = None, None


async def _as_coroutine(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


def _fault_error(fault: Fault) -> BotApiError | None:
    """The error answer a fault stands for; None for faults about the connection itself."""
    if fault.kind == "rate_limit":
        return BotApiError(429, f"Too Many Requests: retry after {fault.retry_after}", retry_after=fault.retry_after)
    if fault.kind == "server_error":
        return BotApiError(fault.status, _status_phrase(fault.status))
    if fault.kind == "cant_parse_entities":
        return _bad_request('can\'t parse entities: Unsupported start tag "injected" at byte offset 0')
    if fault.kind == "too_long":
        return _bad_request("message is too long")
    return None


def _status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _nginx_page(status: int) -> str:
    title = f"{status} {_status_phrase(status)}"
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>"
        "\r\n<hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"
    )


# --------------------------------------------------------------------------------------------
# The HTTP server
# --------------------------------------------------------------------------------------------


class _HttpServer:
    """The aiohttp side: routes requests to `_BotApi`, long-polls getUpdates, injects faults."""

    def __init__(self, token: str, api: _BotApi, queue: _UpdateQueue, log: _CallLog, faults: _FaultPlan) -> None:
        self._token = token
        self._api = api
        self._queue = queue
        self._log = log
        self._faults = faults
        self._thread = _LoopThread()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self._closing = False
        self._poll_generation = 0
        self._poll_wakeup: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> int:
        if self.port is None:
            self._closing = False
            self._thread.start()
            self.port = self._thread.run(self._serve())
        return self.port

    def stop(self) -> None:
        if self.port is None:
            return
        self._closing = True
        try:
            self._thread.run(self._shutdown(), timeout=15)
        finally:
            self._thread.stop()
            self.port = None

    def run(self, coro: Awaitable[_T], timeout: float) -> _T:
        """Run `coro` on the server's loop and wait for its result (from another thread)."""
        return self._thread.run(coro, timeout)

    async def _serve(self) -> int:
        self._poll_wakeup = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self.wake_pollers()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- requests --------------------------------------------------------------------------
    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        stored = self._api.world.file_by_path(request.match_info["path"])
        if request.match_info["token"] != self._token or stored is None:
            return web.json_response(BotApiError(404, "Not Found").to_json(), status=404)
        return web.Response(body=stored.content, content_type="application/octet-stream")

    def _resolve(self, name: str) -> tuple[str, SyncMethod | None] | None:
        """Canonical method name and implementation (None for getUpdates); None if unknown."""
        if name.lower() == "getupdates":
            return "getUpdates", None
        for canonical, impl in self._api.methods.items():
            if canonical.lower() == name.lower():
                return canonical, impl
        return None

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        params = await _read_params(request)
        resolved = self._resolve(request.match_info["method"])
        call = self._log.start(resolved[0] if resolved else request.match_info["method"], params)
        try:
            outage = self._faults.outage
            if outage is not None:
                return await self._inject(call, outage, None)
            if request.match_info["token"] != self._token:
                raise BotApiError(401, "Unauthorized")
            if resolved is None:
                raise BotApiError(404, "Not Found")
            fault = self._faults.take(call.method)
            if fault is not None:
                return await self._inject(call, fault, resolved[1], request)
            result = await self._run(resolved[1], params)
        except BotApiError as error:
            self._log.finish(call, status=error.error_code, error=error.description)
            return web.json_response(error.to_json(), status=error.error_code)
        except _DropConnection:
            self._log.finish(call, status=None, error="connection dropped")
            _drop(request)
        except _ClientGone:
            _drop(request)
        self._log.finish(call, status=200, result=copy.deepcopy(result))
        return web.json_response(_ok(result))

    async def _run(self, impl: SyncMethod | None, params: JsonDict) -> Any:
        if impl is None:
            return await self._get_updates(params)
        with self._api.world.lock:
            return impl(params)

    async def _inject(
        self, call: RecordedCall, fault: Fault, impl: SyncMethod | None, request: web.Request | None = None
    ) -> web.StreamResponse:
        """Answer `call` as `fault` dictates (raises BotApiError / _DropConnection or answers)."""
        call.fault = fault.kind
        error = _fault_error(fault)
        if fault.kind == "server_error" and fault.html_body:
            self._log.finish(call, status=fault.status, error=_status_phrase(fault.status))
            return web.Response(status=fault.status, text=_nginx_page(fault.status), content_type="text/html")
        if error is not None:
            raise error
        if fault.kind == "drop_connection":
            raise _DropConnection
        if not fault.apply:  # a timeout that loses the call
            await self._sleep(fault.seconds)
            raise _DropConnection
        if fault.kind == "slow":
            await self._sleep(fault.seconds)
            if request is not None and (request.transport is None or request.transport.is_closing()):
                self._log.finish(call, status=499, error="the client went away before the call arrived")
                raise _ClientGone
        try:  # a timeout after the call took effect
            body, status = _ok(await self._run(impl, call.params)), 200
            self._log.finish(call, status=200, result=copy.deepcopy(body["result"]))
        except BotApiError as failure:
            body, status = failure.to_json(), failure.error_code
            self._log.finish(call, status=status, error=failure.description)
        if fault.kind != "slow":
            await self._sleep(fault.seconds)
        return web.json_response(body, status=status)

    async def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._closing and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    # -- getUpdates ------------------------------------------------------------------------
    def wake_pollers(self) -> None:
        """Make every pending getUpdates re-check its situation (callable from any thread)."""

        def wake() -> None:
            if self._poll_wakeup is not None:
                self._poll_wakeup.set()
                self._poll_wakeup = asyncio.Event()

        self._thread.call_soon(wake)

    async def _get_updates(self, params: JsonDict) -> list[JsonDict]:
        if self._api.webhook.url:
            raise BotApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = _as_int(params.get("offset"), 0)
        limit = min(max(_as_int(params.get("limit"), 100), 1), 100)
        deadline = time.monotonic() + max(_as_int(params.get("timeout"), 0), 0)
        if "allowed_updates" in params:
            allowed = params["allowed_updates"]
            self._queue.set_allowed(allowed if isinstance(allowed, list) else None)
        self._poll_generation += 1
        generation = self._poll_generation
        self.wake_pollers()  # an older long poll gets 409, like Telegram
        self._queue.acknowledge(offset)
        while True:
            wakeup = self._poll_wakeup
            self._check_poll_still_wanted(generation)
            updates = self._queue.take(offset, limit)
            remaining = deadline - time.monotonic()
            if updates or remaining <= 0 or self._closing or wakeup is None:
                return updates
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), remaining)

    def _check_poll_still_wanted(self, generation: int) -> None:
        if self._faults.outage is not None:
            raise _DropConnection
        if generation != self._poll_generation:
            raise BotApiError(
                409,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
            )
        if self._api.webhook.url:
            raise BotApiError(409, "Conflict: terminated by setWebhook request")


# --------------------------------------------------------------------------------------------
# Inbound updates (what users do) and inspection (what the bot did)
# --------------------------------------------------------------------------------------------


class _InboundUpdates:
    """Mixin of `FakeTelegram`: build realistic updates for what users do and queue them."""

    bot_user: JsonDict
    _world: _World
    _queue: _UpdateQueue
    _api: _BotApi
    _server: _HttpServer
    _callback_seq: Iterator[int]
    _media_group_seq: Iterator[int]

    def push_update(self, update: JsonDict) -> int:
        """Queue a raw Update dict (update_id is assigned when missing); returns the update_id."""
        update_id = self._queue.push(copy.deepcopy(update))
        self._server.wake_pollers()
        return update_id

    def redeliver(self, update_id: int) -> int:
        """Queue an already pushed update again, as Telegram does after an unacknowledged delivery.

        It is returned by the next getUpdates even if the bot's offset is already past it.
        """
        self._queue.redeliver(update_id)
        self._server.wake_pollers()
        return update_id

    def update(self, update_id: int) -> JsonDict:
        """A copy of a pushed update, e.g. to post it to a webhook."""
        return self._queue.get(update_id)

    def push_message(
        self,
        chat_id: int,
        text: str,
        *,
        user_id: int | None = None,
        chat_type: str | None = None,
        username: str | None = None,
        first_name: str | None = None,
        reply_to_bot: bool = False,
        reply_to_message_id: int | None = None,
        entities: list[JsonDict] | None = None,
        thread_id: int | None = None,
    ) -> int:
        """A user writes `text` in `chat_id`; returns the update_id.

        chat_type defaults to "private" for positive ids, "supergroup" for -100... ids, else
        "group"; user_id defaults to chat_id in private chats and to 1001 elsewhere.  Without
        explicit `entities`, bot_command and mention entities are added like Telegram does.
        reply_to_bot makes it a reply to the bot's latest message in the chat (an invented one
        if the bot wrote nothing there yet); reply_to_message_id replies to a given message.
        thread_id: sent in that topic of a forum (`open_topic`), as Telegram sends it: `is_topic_message`,
        `message_thread_id`, and the topic's opening message as `reply_to_message` when it replies to none.
        """
        content: JsonDict = {"text": text}
        found = detect_entities(text) if entities is None else entities
        if found:
            content["entities"] = found
        return self._push_user_message(
            chat_id, content, user_id=user_id, chat_type=chat_type, username=username,
            first_name=first_name, reply_to_bot=reply_to_bot, reply_to_message_id=reply_to_message_id,
            thread_id=thread_id,
        )  # fmt: skip

    def open_topic(self, chat_id: int, name: str = "Topic", *, user_id: int = 1001) -> int:
        """A member opens a topic named `name` in `chat_id`, which becomes a forum supergroup; returns the
        topic's id (`message_thread_id`) to push messages into it."""
        return self._world.open_topic(chat_id, name, self._world.user(user_id))

    def close_topic(self, chat_id: int, thread_id: int) -> None:
        """An admin closes a topic: a message the bot (no admin) sends there is refused 400 "TOPIC_CLOSED"; what
        was sent there stays, and can still be edited."""
        self._world.close_topic(chat_id, thread_id)

    def delete_topic(self, chat_id: int, thread_id: int, *, answer: str = TOPIC_NOT_FOUND) -> None:
        """An admin deletes a topic and its messages: a message sent there is refused 400 `answer` ("message
        thread not found", or "TOPIC_DELETED" as Telegram sometimes says), an edit of one of its messages
        "message to edit not found"."""
        self._world.delete_topic(chat_id, thread_id, answer)

    def push_content(self, chat_id: int, content: JsonDict, **sender: Any) -> int:
        """A user sends a message made of the Bot API's `content` fields (a location, a contact, a poll ...)
        as given; returns the update_id. `sender` takes the keyword arguments of `push_message`."""
        return self._push_user_message(chat_id, copy.deepcopy(content), **sender)

    def push_forwarded_message(
        self, chat_id: int, text: str, *, author: str, origin: str = "user", **sender: Any
    ) -> int:
        """A user forwards a message `author` wrote; returns the update_id.

        `origin` is the MessageOrigin's type: "user" (a person, `author` their first name), "hidden_user" (a
        person who hides their account: only the name), "chat" (a group posting as itself) or "channel".
        `sender` takes the keyword arguments of `push_message` (user_id, chat_type, ...).
        """
        date = int(time.time()) - 3600
        origins: dict[str, JsonDict] = {
            "user": {"sender_user": {"id": 777, "is_bot": False, "first_name": author}},
            "hidden_user": {"sender_user_name": author},
            "chat": {"sender_chat": {"id": -100777, "type": "supergroup", "title": author}},
            "channel": {"chat": {"id": -100778, "type": "channel", "title": author}, "message_id": 12},
        }
        content: JsonDict = {"text": text, "forward_origin": {"type": origin, "date": date, **origins[origin]}}
        found = detect_entities(text)
        if found:
            content["entities"] = found
        return self._push_user_message(chat_id, content, **sender)

    def push_photo(
        self,
        chat_id: int,
        *,
        caption: str | None = None,
        content: bytes = b"\xff\xd8\xff\xe0fake-jpeg",
        width: int = 800,
        height: int = 600,
        media_group: str | None = None,
        **sender: Any,
    ) -> int:
        """A user sends a photo; the largest size (the last) is downloadable via getFile.

        `media_group`: the photo is one of an album (its `media_group_id`), for an album whose photos come one
        by one. `sender` takes the keyword arguments of `push_message` (user_id, chat_type, ...).
        """
        stored = self._world.add_file(content, "photo.jpg", "photos")
        thumbnail = {
            "file_id": f"{stored.file_id}_thumb",
            "file_unique_id": f"{stored.file_unique_id}_thumb",
            "width": width // 4,
            "height": height // 4,
            "file_size": len(content) // 4,
        }
        full = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "width": width,
            "height": height,
            "file_size": len(content),
        }
        media: JsonDict = {"photo": [thumbnail, full]}
        if media_group is not None:
            media["media_group_id"] = media_group
        return self._push_media(chat_id, media, caption, sender)

    def push_album(
        self,
        chat_id: int,
        count: int = 3,
        *,
        caption: str | None = None,
        caption_on: int = 0,
        contents: list[bytes] | None = None,
        **sender: Any,
    ) -> list[int]:
        """A user sends `count` photos at once (an album): Telegram delivers each as a message of its own, in
        one media group (the same `media_group_id`), the caption on the first (`caption_on`: the index of the
        one that carries it, as they arrive). `contents`: the photos' bytes (a small fake JPEG each by
        default). Returns the update_ids."""
        group = str(next(self._media_group_seq))
        photos = contents or [b"\xff\xd8\xff\xe0fake-jpeg-%d" % index for index in range(count)]
        updates = []
        for index, content in enumerate(photos):
            stored = self._world.add_file(content, f"photo{index}.jpg", "photos")
            size = {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id, "width": 800, "height": 600,
                    "file_size": len(stored.content)}  # fmt: skip
            media = {"photo": [size], "media_group_id": group}
            updates.append(self._push_media(chat_id, media, caption if index == caption_on else None, sender))
        return updates

    def push_voice(
        self,
        chat_id: int,
        *,
        content: bytes = b"OggS\x00fake-voice",
        duration: int = 2,
        caption: str | None = None,
        **sender: Any,
    ) -> int:
        """A user sends a voice note (audio/ogg, downloadable via getFile)."""
        stored = self._world.add_file(content, "voice.oga", "voice")
        voice = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(content),
        }
        return self._push_media(chat_id, {"voice": voice}, caption, sender)

    def push_document(
        self,
        chat_id: int,
        *,
        content: bytes = b"hello",
        file_name: str = "notes.txt",
        mime_type: str = "text/plain",
        caption: str | None = None,
        **sender: Any,
    ) -> int:
        """A user sends a document (downloadable via getFile)."""
        stored = self._world.add_file(content, file_name, "documents")
        document = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": len(content),
        }
        return self._push_media(chat_id, {"document": document}, caption, sender)

    def push_animation(
        self,
        chat_id: int,
        *,
        content: bytes = b"\x00\x00\x00\x18ftypmp42fake-gif",
        caption: str | None = None,
        **sender: Any,
    ) -> int:
        """A user sends a GIF: Telegram delivers it as a soundless MP4 in `animation` and, for backward
        compatibility, the same file in `document` too (as the Bot API documents the Message object)."""
        stored = self._world.add_file(content, "animation.gif.mp4", "animations")
        animation = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "width": 320,
            "height": 240,
            "duration": 2,
            "file_name": "animation.gif.mp4",
            "mime_type": "video/mp4",
            "file_size": len(content),
        }
        return self._push_media(chat_id, {"animation": animation, "document": dict(animation)}, caption, sender)

    def upgrade_group(self, group_id: int, supergroup_id: int, *, user_id: int = 1001) -> tuple[int, int]:
        """The basic group `group_id` becomes the supergroup `supergroup_id`, as Telegram does it.

        From then on a call that names the old id answers 400 "group chat was upgraded to a supergroup
        chat" with `parameters.migrate_to_chat_id`; the old group gets a service message with
        `migrate_to_chat_id`, then the supergroup one with `migrate_from_chat_id` (both sent by
        `user_id`). Returns the two updates' ids, in that order.
        """
        with self._world.lock:
            self._world.chat(group_id, "group")
            self._world.chat(supergroup_id, "supergroup")
            self._world.migrated[group_id] = supergroup_id
        moved_to = self._push_user_message(group_id, {"migrate_to_chat_id": supergroup_id}, user_id=user_id)
        moved_from = self._push_user_message(supergroup_id, {"migrate_from_chat_id": group_id}, user_id=user_id)
        return moved_to, moved_from

    def refuse_chat(self, chat_id: int, description: str = BOT_BLOCKED) -> None:
        """From now on every call made in `chat_id` is answered as Telegram answers for a chat that takes no
        message from the bot: 403 with `description` (`BOT_BLOCKED`, `USER_DEACTIVATED`, `BOT_KICKED`), or 400
        for `CHAT_NOT_FOUND`. The chat can still write to the bot (`push_message`): Telegram delivers a blocked
        bot's updates when the person unblocks it and writes."""
        status = 400 if description.startswith("Bad Request") else 403
        with self._world.lock:
            self._world.refusing[chat_id] = (status, description)

    def admit_chat(self, chat_id: int) -> None:
        """`chat_id` takes the bot's messages again (unblocked, the bot added back)."""
        with self._world.lock:
            self._world.refusing.pop(chat_id, None)

    def push_sticker(self, chat_id: int, *, emoji: str = "👍", **sender: Any) -> int:
        """A user sends a (static) sticker."""
        stored = self._world.add_file(b"RIFFfake-webp", "sticker.webp", "stickers")
        sticker = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": emoji,
            "file_size": len(stored.content),
        }
        return self._push_media(chat_id, {"sticker": sticker}, None, sender)

    def push_edited_message(
        self, chat_id: int, message_id: int, text: str, *, entities: list[JsonDict] | None = None
    ) -> int:
        """The user edits their earlier message `message_id` to `text`; returns the update_id."""
        with self._world.lock:
            stored = self._world.message(chat_id, message_id)
            if stored is None or stored.from_bot:
                raise KeyError(f"chat {chat_id} has no user message {message_id}")
            stored.payload["text"] = text
            stored.payload["edit_date"] = int(time.time())
            found = detect_entities(text) if entities is None else entities
            if found:
                stored.payload["entities"] = found
            else:
                stored.payload.pop("entities", None)
            message = copy.deepcopy(stored.payload)
        return self.push_update({"edited_message": message})

    def push_callback_query(
        self,
        chat_id: int,
        data: str,
        *,
        message_id: int | None = None,
        user_id: int | None = None,
        username: str | None = None,
    ) -> int:
        """The user presses an inline button with callback `data` under a bot message.

        message_id defaults to the bot's latest message in the chat.  The query id is accepted
        by answerCallbackQuery.  Returns the update_id.
        """
        with self._world.lock:
            stored = self._target_message(chat_id, message_id)
            chat = self._world.chat(chat_id)
            sender_id = user_id if user_id is not None else (chat_id if chat["type"] == "private" else 1001)
            query_id = f"{next(self._callback_seq)}{sender_id}"
            self._api.callback_ids.add(query_id)
            query = {
                "id": query_id,
                "from": self._world.user(sender_id, username),
                "message": copy.deepcopy(stored.payload),
                "chat_instance": f"ci{chat_id}",
                "data": data,
            }
        return self.push_update({"callback_query": query})

    def add_file(self, content: bytes, file_name: str = "file.bin") -> str:
        """Make `content` downloadable via getFile + the file URL; returns its file_id."""
        return self._world.add_file(content, file_name, "documents").file_id

    # -- helpers ---------------------------------------------------------------------------
    def _target_message(self, chat_id: int, message_id: int | None) -> _StoredMessage:
        """Message `message_id` of the chat, or the bot's latest message there when None."""
        if message_id is not None:
            stored = self._world.message(chat_id, message_id)
            if stored is None:
                raise KeyError(f"chat {chat_id} has no message {message_id}")
            return stored
        mine = self._world.messages(chat_id, from_bot=True)
        if not mine:
            raise KeyError(f"the bot sent no message to chat {chat_id}")
        return mine[-1]

    def _push_media(self, chat_id: int, media: JsonDict, caption: str | None, sender: Mapping[str, Any]) -> int:
        content = dict(media)
        if caption is not None:
            content["caption"] = caption
            found = detect_entities(caption)
            if found:
                content["caption_entities"] = found
        return self._push_user_message(chat_id, content, **sender)

    def _push_user_message(
        self,
        chat_id: int,
        content: JsonDict,
        *,
        user_id: int | None = None,
        chat_type: str | None = None,
        username: str | None = None,
        first_name: str | None = None,
        reply_to_bot: bool = False,
        reply_to_message_id: int | None = None,
        thread_id: int | None = None,
    ) -> int:
        with self._world.lock:
            chat = self._world.chat(chat_id, chat_type)
            sender_id = user_id if user_id is not None else (chat_id if chat["type"] == "private" else 1001)
            user = self._world.user(sender_id, username, first_name)
            if chat["type"] == "private" and sender_id == chat_id:
                chat = self._world.chat(chat_id, chat_type, user)
            payload: JsonDict = {"from": user, "chat": chat, "date": int(time.time()), **content}
            reply = self._reply_payload(chat_id, reply_to_bot, reply_to_message_id)
            if thread_id is not None:
                opening = self._world.topic_opening(chat_id, thread_id)
                payload.update(message_thread_id=thread_id, is_topic_message=True)
                reply = reply or _without_reply(opening)
            if reply is not None:
                payload["reply_to_message"] = reply
            message = self._world.new_message(chat_id, False, payload)
        return self.push_update({"message": message})

    def _reply_payload(self, chat_id: int, to_bot: bool, message_id: int | None) -> JsonDict | None:
        if message_id is not None:
            return _without_reply(self._target_message(chat_id, message_id).payload)
        if not to_bot:
            return None
        mine = self._world.messages(chat_id, from_bot=True)
        if mine:
            return _without_reply(mine[-1].payload)
        return {  # the bot never wrote here through the fake: invent an older bot message
            "message_id": 0,
            "from": dict(self.bot_user),
            "chat": self._world.chat(chat_id),
            "date": int(time.time()) - 60,
            "text": "(an earlier message of the bot)",
        }


class _CallInspection:
    """Mixin of `FakeTelegram`: what the bot did, and waiting for it."""

    _log: _CallLog
    _world: _World
    _queue: _UpdateQueue
    _api: _BotApi

    @property
    def calls(self) -> list[RecordedCall]:
        """Every request received so far, in arrival order (including failed ones)."""
        return self._log.snapshot()

    def calls_to(self, method: str) -> list[RecordedCall]:
        """The recorded calls of one method (case-insensitive)."""
        return [c for c in self.calls if c.method.lower() == method.lower()]

    def reset_calls(self) -> None:
        """Forget the recorded calls (state such as messages and updates is kept)."""
        self._log.clear()

    def sent_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        """Successful sendMessage calls (optionally to one chat), oldest first."""
        return [
            SentMessage(
                chat_id=call.params["chat_id"],
                message_id=call.result["message_id"],
                text=str(call.params.get("text", "")),
                parse_mode=call.params.get("parse_mode"),
                entities=call.params.get("entities"),
                reply_markup=call.params.get("reply_markup"),
                time=call.time,
                params=_json_safe(call.params),
                thread_id=call.params.get("message_thread_id"),
            )
            for call in self._ok_calls("sendMessage", chat_id)
        ]

    def sent_documents(self, chat_id: int | None = None) -> list[UploadedFile]:
        """The files of successful sendDocument calls (optionally to one chat), oldest first."""
        found = []
        for call in self._ok_calls("sendDocument", chat_id):
            document = call.params.get("document")
            if isinstance(document, str) and document.startswith("attach://"):
                document = call.params.get(document.removeprefix("attach://"))
            if isinstance(document, UploadedFile):
                found.append(document)
        return found

    def edits(self, chat_id: int | None = None) -> list[EditRecord]:
        """Successful editMessageText calls (optionally in one chat), oldest first."""
        return [
            EditRecord(
                chat_id=call.params["chat_id"],
                message_id=call.params["message_id"],
                text=str(call.params.get("text", "")),
                parse_mode=call.params.get("parse_mode"),
                entities=call.params.get("entities"),
                time=call.time,
            )
            for call in self._ok_calls("editMessageText", chat_id)
            if "chat_id" in call.params
        ]

    def chat_actions(self, chat_id: int | None = None) -> list[str]:
        """Actions ("typing", ...) of successful sendChatAction calls, oldest first."""
        return [str(call.params["action"]) for call in self._ok_calls("sendChatAction", chat_id)]

    def thread_ids(self, method: str, chat_id: int | None = None) -> list[int | None]:
        """The `message_thread_id` of each successful call of `method` (optionally to one chat), oldest first:
        the topic each went to, None for the chat itself (or a forum's General topic)."""
        return [call.params.get("message_thread_id") for call in self._ok_calls(method, chat_id)]

    def drafts(self, chat_id: int | None = None) -> list[DraftRecord]:
        """Successful sendMessageDraft calls, oldest first."""
        return [
            DraftRecord(
                chat_id=call.params["chat_id"],
                draft_id=call.params["draft_id"],
                text=str(call.params.get("text", "")),
                parse_mode=call.params.get("parse_mode"),
                time=call.time,
            )
            for call in self._ok_calls("sendMessageDraft", chat_id)
        ]

    def visible_text(self, chat_id: int) -> list[str]:
        """What the user sees from the bot in `chat_id`: each kept message's final text."""
        return [
            str(m.payload.get("text", m.payload.get("caption", "")))
            for m in self._world.messages(chat_id, from_bot=True)
        ]

    def commands(self, scope: JsonDict | None = None, language_code: str = "") -> list[JsonDict]:
        """The command list the bot set with setMyCommands for this scope and language."""
        return self._api.get_my_commands({"scope": scope, "language_code": language_code})

    def pending_update_count(self) -> int:
        """Updates not acknowledged by the bot yet."""
        return len(self._queue)

    def wait_until(self, condition: Callable[[], bool], timeout: float = WAIT_SECONDS, what: str = "condition") -> None:
        """Block until `condition()` is true (re-checked whenever the bot makes a call)."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            with self._log.condition:
                self._log.condition.wait(min(remaining, 0.05))

    async def await_until(
        self, condition: Callable[[], bool], timeout: float = WAIT_SECONDS, what: str = "condition"
    ) -> None:
        """Async `wait_until`: polls without blocking the caller's event loop."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.01)

    def wait_for_messages(self, chat_id: int, count: int = 1, timeout: float = WAIT_SECONDS) -> list[SentMessage]:
        """Block until at least `count` messages were sent to `chat_id`; returns them all."""
        try:
            self.wait_until(lambda: len(self.sent_messages(chat_id)) >= count, timeout)
        except TimeoutError:
            raise TimeoutError(self._missing_messages(chat_id, count, timeout)) from None
        return self.sent_messages(chat_id)

    async def await_messages(self, chat_id: int, count: int = 1, timeout: float = WAIT_SECONDS) -> list[SentMessage]:
        """Async `wait_for_messages` that keeps the caller's event loop running."""
        try:
            await self.await_until(lambda: len(self.sent_messages(chat_id)) >= count, timeout)
        except TimeoutError:
            raise TimeoutError(self._missing_messages(chat_id, count, timeout)) from None
        return self.sent_messages(chat_id)

    def _missing_messages(self, chat_id: int, count: int, timeout: float) -> str:
        texts = [m.text for m in self.sent_messages(chat_id)]
        return f"timed out after {timeout}s waiting for {count} message(s) to chat {chat_id}; got {texts!r}"

    def _ok_calls(self, method: str, chat_id: int | None) -> Iterator[RecordedCall]:
        for call in self.calls_to(method):
            if call.ok and (chat_id is None or call.params.get("chat_id") == chat_id):
                yield call


# --------------------------------------------------------------------------------------------
# The public fake
# --------------------------------------------------------------------------------------------


class FakeTelegram(_InboundUpdates, _CallInspection):
    """A fake Telegram Bot API server on 127.0.0.1 for tests (see the module docstring).

    Use as a context manager or call `start()`/`stop()`.  Feed the bot with `push_*`, inspect
    what it did with `calls`, `sent_messages`, `visible_text`, ..., wait for it with
    `wait_for_messages` / `await_messages`, and break things with `fail_next` / `go_down`.
    """

    def __init__(
        self,
        token: str = "123456:TEST",
        bot_username: str = "test_bot",
        *,
        strict_ampersand: bool = True,
    ) -> None:
        """`strict_ampersand`: also reject HTML with a bare '&' (real Telegram tolerates it)."""
        self._token = token
        bot_id = token.split(":", 1)[0]
        self.bot_user: JsonDict = {
            "id": int(bot_id) if bot_id.isdigit() else 123456,
            "is_bot": True,
            "first_name": "Test Bot",
            "username": bot_username,
        }
        self._world = _World(self.bot_user)
        self._queue = _UpdateQueue()
        self._api = _BotApi(self._world, self._queue, strict_ampersand=strict_ampersand)
        self._log = _CallLog()
        self._faults = _FaultPlan()
        self._server = _HttpServer(token, self._api, self._queue, self._log, self._faults)
        self._api.on_webhook_change = self._server.wake_pollers
        self._callback_seq = itertools.count(1)
        self._media_group_seq = itertools.count(13_000_000)

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def token(self) -> str:
        """The bot token the fake accepts (any other token gets 401 Unauthorized)."""
        return self._token

    @property
    def root(self) -> str:
        """Base URL of the fake, e.g. ``http://127.0.0.1:PORT`` (the bot's TELEGRAM_API_BASE_URL)."""
        if self._server.port is None:
            raise RuntimeError("FakeTelegram is not started")
        return f"http://127.0.0.1:{self._server.port}"

    @property
    def api_url(self) -> str:
        """``{root}/bot{token}``: the prefix of every method URL."""
        return f"{self.root}/bot{self._token}"

    def start(self) -> FakeTelegram:
        """Start the server in its own thread (idempotent); returns self."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop the server (open long polls are answered first) and its thread (idempotent)."""
        self._server.stop()

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- webhooks --------------------------------------------------------------------------
    @property
    def webhook_url(self) -> str:
        """The URL the bot registered with setWebhook ("" when none)."""
        return self._api.webhook.url

    @property
    def webhook_secret(self) -> str | None:
        """The secret_token the bot registered with setWebhook."""
        return self._api.webhook.secret_token

    async def post_webhook_update(
        self, update: JsonDict | int, *, secret: str | EllipsisType | None = ..., timeout: float = 10.0
    ) -> int:
        """POST an update (a dict, or the id of a pushed one) to the registered webhook URL.

        secret=... (default) sends the secret_token the bot registered in
        X-Telegram-Bot-Api-Secret-Token, None sends no header, a string sends that string.
        Runs in the caller's loop (so a receiver in the same loop can answer); returns the HTTP
        status.  From sync code use `post_webhook_update_sync`.
        """
        url = self._api.webhook.url
        if not url:
            raise RuntimeError("the bot registered no webhook")
        body = self.update(update) if isinstance(update, int) else update
        token = self._api.webhook.secret_token if isinstance(secret, EllipsisType) else secret
        headers = {"X-Telegram-Bot-Api-Secret-Token": token} if token else {}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.post(url, json=body, headers=headers) as response,
        ):
            return response.status

    def post_webhook_update_sync(
        self, update: JsonDict | int, *, secret: str | EllipsisType | None = ..., timeout: float = 10.0
    ) -> int:
        """Blocking `post_webhook_update`, run on the fake's own loop (for sync tests)."""
        return self._server.run(self.post_webhook_update(update, secret=secret, timeout=timeout), timeout + 5)

    # -- faults and extensions -------------------------------------------------------------
    def fail_next(self, method: str, kind: Fault | FaultKind, times: int = 1, **options: Any) -> None:
        """Make the next `times` calls of `method` (case-insensitive, "*" = any) fail with `kind`.

        `kind` is a `Fault` (``Fault.rate_limit(3)``) or its name with options
        (``fail_next("sendMessage", "timeout", seconds=2, apply=True)``).
        """
        fault = kind if isinstance(kind, Fault) else Fault.named(kind, **options)
        self._faults.arm(method, fault, times)

    def clear_faults(self) -> None:
        """Forget all faults not consumed yet."""
        self._faults.clear()

    def go_down(self, fault: Fault | None = None) -> None:
        """Simulate an outage: every request (and any open long poll) gets `fault`.

        Default: the connection is dropped without an answer.  Pass e.g.
        ``Fault.server_error(502, html_body=True)`` to answer like nginx instead.  Ends with
        `come_up`.
        """
        self._faults.outage = fault or Fault.drop_connection()
        self._server.wake_pollers()

    def come_up(self) -> None:
        """End an outage started by `go_down`."""
        self._faults.outage = None

    def register_method(self, name: str, handler: Callable[[JsonDict], Any]) -> None:
        """Serve an extra Bot API method: handler(params) returns the result or raises BotApiError."""
        self._api.methods[name] = handler


def _without_reply(payload: JsonDict) -> JsonDict:
    return {k: v for k, v in copy.deepcopy(payload).items() if k != "reply_to_message"}


def _as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _drop(request: web.Request) -> NoReturn:
    """Close the client's socket; aiohttp then cannot send the placeholder response."""
    if request.transport is not None:
        request.transport.close()
    raise web.HTTPServiceUnavailable()

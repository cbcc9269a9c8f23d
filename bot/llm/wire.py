"""The one translation from the domain's `Message` to the OpenAI chat-completions wire format.

A user message is shown to the model with what the session records around its text: the sender's
name (in a group; a private chat names the person once, in the system prompt), the message it replies to, that
it corrects an earlier message (an edit), and its images: as `image_url` parts where the caller
gives their data URLs (`images`), else as a one-line text stand-in.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from bot.domain.conversation import Incremental
from bot.domain.message import Message, Role, forwarded_note

# A stand-in uses at most this much of the caption or of what the model said when it saw the image.
STAND_IN_CHARS = 160


# A run of one character repeated at least this many times (indentation, a rule of dashes): a tokenizer
# takes it in a few tokens, far more characters a token than any other text.
REPEAT_RUN = 3
_RUN = re.compile(rf"(.)\1{{{REPEAT_RUN - 1},}}", re.DOTALL)


@dataclass(frozen=True)
class WireSize:
    """What calibration reads of a request's wire messages: how many, the characters the model reads in
    them (`wire_chars`), their image parts, and how many of the characters repeat the one before in a run
    (`repeated_chars`)."""

    messages: int
    chars: int
    image_parts: int
    repeated: int = 0

    NONE: ClassVar[WireSize]

    @classmethod
    def of(cls, wire_messages: list[dict[str, Any]]) -> WireSize:
        texts = list(_texts(wire_messages))
        return cls(
            len(wire_messages), sum(map(len, texts)), image_parts(wire_messages), sum(map(repeated_chars, texts))
        )

    @property
    def dense_chars(self) -> int:
        """The characters outside the repeats of runs: each costs a tokenizer a share of a token at least."""
        return self.chars - self.repeated

    def __add__(self, other: WireSize) -> WireSize:
        return WireSize(
            self.messages + other.messages,
            self.chars + other.chars,
            self.image_parts + other.image_parts,
            self.repeated + other.repeated,
        )


WireSize.NONE = WireSize(0, 0, 0)


def image_parts(wire_messages: list[dict[str, Any]]) -> int:
    """How many `image_url` parts the wire messages carry."""
    return sum(
        1
        for wire in wire_messages
        if isinstance(wire.get("content"), list)
        for part in wire["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )


def wire_chars(wire_messages: list[dict[str, Any]]) -> int:
    """Characters of `payload_text` that come from the messages (contents and tool calls)."""
    return sum(map(len, _texts(wire_messages)))


def repeated_chars(text: str) -> int:
    """The characters of `text` that repeat the one before in a run of `REPEAT_RUN` or more (all but the first)."""
    return sum(len(run.group()) - 1 for run in _RUN.finditer(text))


def _texts(wire_messages: list[dict[str, Any]]) -> Iterator[str]:
    """The texts of the messages the model reads: contents, and tool calls' names and arguments."""
    for wire in wire_messages:
        content = wire.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (str(part.get("text", "")) for part in content if isinstance(part, dict))
        for call in wire.get("tool_calls") or []:
            function = call.get("function", {})
            yield str(function.get("name", ""))
            yield str(function.get("arguments", ""))


def to_openai_message(
    message: Message,
    images: list[str] | None = None,
    *,
    show_name: bool = False,
    corrected: str | None = None,
    seen_as: str | None = None,
) -> dict[str, Any]:
    """`message` on the wire; `images` are data URLs of its images to send as parts."""
    wire: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.USER:
        text = user_text(message, show_name=show_name, corrected=corrected, seen_as=None if images else seen_as)
        wire["content"] = [{"type": "text", "text": text}] + [
            {"type": "image_url", "image_url": {"url": url}} for url in images
        ] if images else text  # fmt: skip
    if message.role is Role.ASSISTANT and message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.role is Role.TOOL:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def user_text(message: Message, *, show_name: bool, corrected: str | None = None, seen_as: str | None = None) -> str:
    """A user message's text as the model reads it, with who wrote it and what it refers to."""
    if _plain(message, show_name):
        return message.content  # most messages: nothing to add (this runs for every message of every request)
    lines: list[str] = []
    if message.quote is not None:
        lines.append(f'[Replying to {message.quote.author}: "{message.quote.text}"]')
    if message.forwarded_from is not None:
        lines.append(forwarded_note(message.forwarded_from))
    if message.correction_of is not None:
        earlier = f' "{_one_line(corrected)}"' if corrected else ""
        lines.append(f"[Correction: I edited my earlier message{earlier}; it now reads:]")
    for media in message.media or []:
        if media.kind == "image" and seen_as is not None:
            lines.append(f"[Image sent earlier: {seen_as}]")
    body = message.content
    if show_name and message.sender is not None:
        body = f"{message.sender.name}: {body}"
    lines.append(body)
    return "\n".join(line for line in lines if line)


def to_openai_messages(
    system_prompt: str,
    messages: list[Message],
    images: Mapping[str, list[str]] | None = None,
    *,
    group: bool = False,
    turn_prompt: str = "",
) -> list[dict[str, Any]]:
    """The system prompt first (when there is one), then the conversation as stored, with `turn_prompt`
    (what changes from one message to the next) as a second system message just before the newest
    user message.

    Providers cache a prompt by its prefix: with everything that changes each turn placed after the
    history, each request begins with the whole of the one before, up to where that one's turn
    prompt stood. `images` maps a message id to the data URLs of its images to send; a message with
    images not in it gets a text stand-in. `group`: every user message carries its sender's name.
    (`WireForms` gives the same, keeping each message's form as a conversation grows.)
    """
    forms = _Forms()
    for message in messages:
        _with_form(forms, message, group=group)
    return _assembled(system_prompt, messages, forms, images, group, turn_prompt).messages


class WireForms:
    """`to_openai_messages` for the conversations of a running bot, with the request's JSON: the form of
    each message that needs nothing but itself, and its JSON, are made once and kept as its conversation
    grows (`Incremental`), so a request costs the new messages and the few whose form depends on the rest
    of it (images, quotes, names, corrections), not the whole history. The forms kept are shared by every
    request: not to be changed."""

    def __init__(self) -> None:
        self._forms = {
            group: Incremental(_Forms, functools.partial(_with_form, group=group)) for group in (False, True)
        }

    def messages(
        self,
        system_prompt: str,
        messages: list[Message],
        images: Mapping[str, list[str]] | None = None,
        *,
        group: bool = False,
        turn_prompt: str = "",
    ) -> WireMessages:
        forms = self._forms[group].over(messages)
        return _assembled(system_prompt, messages, forms, images, group, turn_prompt)


@dataclass(frozen=True)
class WireMessages:
    """A request's messages in the wire format, each one's JSON as the request body carries it (UTF-8),
    and their size as calibration reads it."""

    messages: list[dict[str, Any]]
    jsons: list[bytes]
    size: WireSize


@dataclass
class _Forms:
    """Each message's wire form and its JSON (UTF-8), or None and b"" where it depends on the rest of the request (a
    user message with a quote, a correction, images or a name to show); the positions of those, whether
    any corrects, and the size of the forms made."""

    forms: list[dict[str, Any] | None] = field(default_factory=list)
    jsons: list[bytes] = field(default_factory=list)
    in_context: list[int] = field(default_factory=list)
    corrections: bool = False
    size: WireSize = WireSize.NONE


def _with_form(forms: _Forms, message: Message, *, group: bool) -> _Forms:
    role = message.role
    if role is Role.USER and not _plain(message, group):
        forms.in_context.append(len(forms.forms))
        forms.forms.append(None)
        forms.jsons.append(b"")
        forms.corrections = forms.corrections or message.correction_of is not None
        return forms
    if role is Role.USER or (role is Role.ASSISTANT and not message.tool_calls):
        form = {"role": role.value, "content": message.content}  # most messages: the text alone
    else:
        form = to_openai_message(message)
    forms.forms.append(form)
    forms.jsons.append(wire_bytes(form))
    forms.size += WireSize.of([form])
    return forms


def wire_json(value: object) -> str:
    """Compact JSON, as the `openai` library encodes a request (characters beyond ASCII as they are)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def wire_bytes(value: object) -> bytes:
    """`wire_json` as a request body carries it: UTF-8, a lone surrogate (from a broken upload) escaped."""
    return wire_json(value).encode("utf-8", "backslashreplace")


def _assembled(
    system_prompt: str,
    messages: list[Message],
    forms: _Forms,
    images: Mapping[str, list[str]] | None,
    group: bool,
    turn_prompt: str,
) -> WireMessages:
    """The request's messages: the forms, those that depend on the request made now, the prompts around."""
    wire, jsons, size = forms.forms.copy(), forms.jsons.copy(), forms.size
    # Only an edit needs to find the message it corrects; most conversations have none.
    by_id = {message.id: message for message in messages} if forms.corrections else {}
    for index in forms.in_context:
        message = messages[index]
        earlier = by_id.get(message.correction_of) if message.correction_of else None
        form = to_openai_message(
            message,
            (images or {}).get(message.id),
            show_name=group and message.sender is not None,
            corrected=earlier.content if earlier is not None else None,
            seen_as=stand_in(message, messages, index + 1) if message.media else None,
        )
        wire[index], jsons[index] = form, wire_bytes(form)
        size += WireSize.of([form])
    complete = cast(list[dict[str, Any]], wire)
    prompts: list[tuple[int, str]] = []
    if turn_prompt:
        newest_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role is Role.USER), len(wire))
        prompts.append((newest_user, turn_prompt))
    if system_prompt:
        prompts.append((0, system_prompt))
    for position, prompt in prompts:
        form = {"role": "system", "content": prompt}
        complete.insert(position, form)
        jsons.insert(position, wire_bytes(form))
        size += WireSize.of([form])
    # The parts are joined once, into the request body (`LlmClient`), not copied into a list of messages first.
    return WireMessages(complete, jsons, size)


def _plain(message: Message, group: bool) -> bool:
    """Whether a user message goes as its text alone: no quote, not forwarded, no correction, no image, no name
    to show."""
    return (
        message.quote is None
        and message.forwarded_from is None
        and message.correction_of is None
        and not message.media
        and not (group and message.sender is not None)
    )


def stand_in(message: Message, conversation: list[Message], after: int) -> str:
    """One line for an image no longer sent: what the model first said of it (in `conversation` from
    position `after` on), else its caption."""
    for later in itertools.islice(conversation, after, None):
        if later.role is Role.USER:
            break
        if later.role is Role.ASSISTANT and later.content.strip() and not later.tool_calls:
            sentence = later.content.strip().split("\n", 1)[0].split(". ", 1)[0]
            return f"you said of it: {_one_line(sentence)}"
    captions = [media.caption for media in message.media or [] if media.caption]
    return f"caption: {_one_line(captions[0])}" if captions else "no caption"


def _one_line(text: str | None) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= STAND_IN_CHARS else flat[: STAND_IN_CHARS - 1] + "…"

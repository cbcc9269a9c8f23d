"""The one translation to the OpenAI wire format: old session messages as before, and what a user
message now carries (sender, quote, correction, images or their stand-ins)."""

from __future__ import annotations

import json
from typing import Any

from bot.domain.message import MediaRef, Message, Quote, Sender, ToolCall
from bot.llm.wire import WireForms, WireSize, to_openai_messages


def test_a_message_of_an_older_session_file_loads_and_is_sent_as_before() -> None:
    old = Message.model_validate({"id": "m1", "role": "user", "content": "hello", "timestamp": "2025-01-02T10:00:00Z"})
    assert (old.sender, old.quote, old.media, old.correction_of) == (None, None, None, None)
    assert to_openai_messages("sys", [old]) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
    ]
    assert "sender" not in old.to_json_dict() and "media" not in old.to_json_dict()


def test_names_only_in_groups_and_quotes_always() -> None:
    ann = Message.user("and tomorrow?").model_copy(
        update={"sender": Sender(id="1001", name="Ann"), "quote": Quote(author="Bob", text="rain today")}
    )
    [private] = to_openai_messages("", [ann])
    assert private["content"] == '[Replying to Bob: "rain today"]\nand tomorrow?'
    [group] = to_openai_messages("", [ann], group=True)
    assert group["content"] == '[Replying to Bob: "rain today"]\nAnn: and tomorrow?'


def test_an_image_is_a_part_when_given_and_a_stand_in_otherwise() -> None:
    photo = Message.user("my cat").model_copy(
        update={"media": [MediaRef(path="media/telegram:1/a.jpg", caption="my cat")]}
    )
    answer = Message.assistant("A grey cat on a sofa. Cute!")
    sent = to_openai_messages("", [photo, answer], {photo.id: ["data:image/jpeg;base64,AAAA"]})
    assert sent[0]["content"] == [
        {"type": "text", "text": "my cat"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
    ]
    later = to_openai_messages("", [photo, answer])
    assert later[0]["content"] == "[Image sent earlier: you said of it: A grey cat on a sofa]\nmy cat"
    unanswered = to_openai_messages("", [photo])
    assert unanswered[0]["content"] == "[Image sent earlier: caption: my cat]\nmy cat"


def test_a_correction_quotes_the_message_it_corrects() -> None:
    first = Message.user("I arrive Monday")
    fixed = Message.user("I arrive Tuesday").model_copy(update={"correction_of": first.id})
    sent = to_openai_messages("", [first, Message.assistant("Ok."), fixed])
    assert sent[-1]["content"] == (
        '[Correction: I edited my earlier message "I arrive Monday"; it now reads:]\nI arrive Tuesday'
    )
    alone = to_openai_messages("", [fixed])  # the original was compacted away
    assert alone[0]["content"] == "[Correction: I edited my earlier message; it now reads:]\nI arrive Tuesday"


def grown_conversation() -> list[Message]:
    """Every kind of message the wire form has a case for, plain text in between."""
    call = ToolCall(id="c1", name="read_file", arguments='{"path": "notes.md"}')
    first = Message.user("I arrive Monday").model_copy(update={"sender": Sender(id="1", name="Ann")})
    return [
        first,
        Message.assistant("Noted."),
        Message.user("my cat").model_copy(update={"media": [MediaRef(path="media/telegram:1/a.jpg", caption="cat")]}),
        Message.assistant("A grey cat. Cute!"),
        Message.assistant("", tool_calls=[call]),
        Message.tool_result(call, "the notes"),
        Message.user("and tomorrow?").model_copy(update={"quote": Quote(author="Bob", text="rain today")}),
        Message.user("I arrive Tuesday").model_copy(update={"correction_of": first.id}),
        Message.assistant("Changed to Tuesday."),
    ]


def test_the_kept_wire_forms_give_what_a_conversion_from_scratch_gives_as_the_conversation_grows() -> None:
    forms = WireForms()
    conversation: list[Message] = []
    for message in grown_conversation():
        conversation.append(message)
        for group in (False, True):
            images = {conversation[2].id: ["data:image/jpeg;base64,AAAA"]} if len(conversation) > 2 else None
            kept = forms.messages("persona", conversation, images, group=group, turn_prompt="# Memory")
            fresh = to_openai_messages("persona", conversation, images, group=group, turn_prompt="# Memory")
            assert kept.messages == fresh and [json.loads(part) for part in kept.jsons] == fresh
            assert kept.size == WireSize.of(fresh)
    compacted = [Message.system("[Conversation summary] Ann arrives Tuesday."), *conversation[-2:]]
    assert forms.messages("", compacted).messages == to_openai_messages("", compacted)


def test_a_size_counts_the_repeats_of_runs_apart() -> None:
    wire: list[dict[str, Any]] = [
        {"role": "user", "content": "=" * 40 + "\n" + " " * 8 + "indented"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"function": {"name": "run", "arguments": "{}"}}]},
    ]
    size = WireSize.of(wire)
    assert (size.messages, size.chars) == (2, 40 + 1 + 8 + 8 + 2 + 3 + 2)
    assert size.repeated == 39 + 7  # all but the first of each run; "ok" and "{}" are not runs
    assert size.dense_chars == size.chars - 46
    assert (size + size).repeated == 92

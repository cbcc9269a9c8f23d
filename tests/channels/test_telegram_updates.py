"""Which Telegram updates become messages for the bot, and what they carry."""

from __future__ import annotations

from typing import Any

import pytest

from bot.channels.telegram_updates import (
    BotIdentity,
    TopicName,
    album_key,
    chat_move_from_update,
    inbound_from_update,
    named_topic,
)
from bot.domain.chat_move import ChatMove
from bot.domain.inbound import Attachment
from bot.domain.message import Quote
from bot.settings import TelegramGroupsConfig
from tests.fakes.telegram_server import detect_entities

BOT = BotIdentity(id=99, username="test_bot")
GROUPS = TelegramGroupsConfig()
# Passed as keywords: `from` is a Python keyword.
FROM_ANOTHER_BOT: dict[str, Any] = {"from": {"id": 5, "is_bot": True, "first_name": "B"}}


def message_update(
    text: str | None = None, *, chat_id: int = 42, chat_type: str = "private", **fields: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "message_id": 7,
        "date": 0,
        "chat": {"id": chat_id, "type": chat_type},
        "from": {"id": 42 if chat_type == "private" else 1001, "is_bot": False, "first_name": "Ann", "username": "ann"},
        **fields,
    }
    if text is not None:
        message["text"] = text
        entities = detect_entities(text)
        if entities:
            message["entities"] = entities
    return {"update_id": 1000, "message": message}


def test_a_private_text_becomes_a_message_with_its_ids() -> None:
    inbound = inbound_from_update(message_update("hello"), BOT, GROUPS)
    assert inbound is not None
    assert (inbound.channel_type, inbound.chat_id, inbound.user_id, inbound.text) == ("telegram", "42", "42", "hello")
    assert (inbound.message_id, inbound.username, inbound.is_group, inbound.dedup_key) == ("7", "ann", False, "1000")
    assert inbound.session_id == "telegram:42"


def test_a_caption_counts_as_text() -> None:
    update = message_update(photo=[{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}], caption="what?")
    inbound = inbound_from_update(update, BOT, GROUPS)
    assert inbound is not None and inbound.text == "what?"
    assert inbound.attachment == Attachment("image", "f", "image/jpeg", 0, width=1, height=1)
    assert inbound.notice is None
    assert inbound.sender_name == "Ann"


def test_a_photo_brings_its_largest_size_within_the_pixel_budget() -> None:
    sizes = [
        {"file_id": "small", "width": 320, "height": 240, "file_size": 10},
        {"file_id": "medium", "width": 800, "height": 600, "file_size": 50},
        {"file_id": "large", "width": 2560, "height": 1920, "file_size": 400},
    ]
    inbound = inbound_from_update(message_update(photo=sizes), BOT, GROUPS, max_image_pixels=1_000_000)
    assert inbound is not None and inbound.attachment is not None
    # What the image costs the prompt follows from its pixel size, carried as numbers to the model.
    assert inbound.attachment == Attachment("image", "medium", "image/jpeg", 50, width=800, height=600)
    tiny_budget = inbound_from_update(message_update(photo=sizes), BOT, GROUPS, max_image_pixels=10_000)
    assert tiny_budget is not None and tiny_budget.attachment is not None
    assert tiny_budget.attachment.file_id == "small"


def test_an_image_file_is_an_image_and_a_pdf_a_document() -> None:
    png = {"file_id": "p", "file_name": "chart.png", "mime_type": "image/png", "file_size": 9}
    as_image = inbound_from_update(message_update(document=png), BOT, GROUPS)
    assert as_image is not None and as_image.attachment == Attachment("image", "p", "image/png", 9, "chart.png")
    unnamed = {"file_id": "j", "file_name": "scan.JPG", "mime_type": "application/octet-stream"}
    jpeg = inbound_from_update(message_update(document=unnamed), BOT, GROUPS)
    assert jpeg is not None and jpeg.attachment is not None
    assert (jpeg.attachment.kind, jpeg.attachment.mime) == ("image", "image/jpeg")
    pdf = {"file_id": "d", "file_name": "a.pdf", "mime_type": "application/pdf"}
    document = inbound_from_update(message_update(document=pdf), BOT, GROUPS)
    assert document is not None and document.attachment == Attachment("document", "d", "application/pdf", 0, "a.pdf")


def test_a_voice_note_and_an_audio_file_carry_what_transcription_needs() -> None:
    voice = {"file_id": "v", "duration": 3, "mime_type": "audio/ogg", "file_size": 1234}
    inbound = inbound_from_update(message_update(voice=voice), BOT, GROUPS)
    assert inbound is not None and inbound.text == ""
    assert inbound.attachment == Attachment("audio", "v", "audio/ogg", 1234, "voice.ogg", seconds=3)
    audio = {"file_id": "a", "file_name": "memo.mp3", "mime_type": "audio/mpeg", "file_size": 5}
    song = inbound_from_update(message_update(audio=audio), BOT, GROUPS)
    assert song is not None and song.attachment == Attachment("audio", "a", "audio/mpeg", 5, "memo.mp3")


def test_a_reply_carries_the_quoted_text_and_its_author() -> None:
    replied = {"message_id": 3, "from": {"id": 7, "first_name": "Bob", "last_name": "Stone"}, "text": "lunch at 1?"}
    inbound = inbound_from_update(message_update("fine by me", reply_to_message=replied), BOT, GROUPS)
    assert inbound is not None and inbound.quote == Quote(author="Bob Stone", text="lunch at 1?")
    assert inbound.attachment is None
    picked = message_update("yes", reply_to_message=replied, quote={"text": "at 1", "position": 9})
    partial = inbound_from_update(picked, BOT, GROUPS)
    assert partial is not None and partial.quote is not None and partial.quote.text == "at 1"
    to_bot = {"message_id": 4, "from": {"id": BOT.id, "is_bot": True, "first_name": "Bot"}, "text": "x" * 900}
    long = inbound_from_update(message_update("why?", reply_to_message=to_bot), BOT, GROUPS)
    assert long is not None and long.quote is not None and long.quote.author == "you (the assistant)"
    assert len(long.quote.text) == 500 and long.quote.text.endswith("…")


def test_a_forwarded_message_names_who_wrote_it() -> None:
    def author(**fields: Any) -> str | None:
        inbound = inbound_from_update(message_update("the news", **fields), BOT, GROUPS)
        assert inbound is not None and inbound.text == "the news"
        return inbound.forwarded_from

    group = {"id": -100, "type": "supergroup", "title": "Book club"}
    assert author(forward_origin={"type": "chat", "date": 0, "sender_chat": group}) == "Book club"
    assert author(forward_origin={"type": "user", "date": 0, "sender_user": {"id": 5, "username": "bob"}}) == "@bob"
    # The fields of a Bot API server older than 7.0.
    assert author(forward_from={"id": 5, "is_bot": False, "first_name": "Bob"}, forward_date=0) == "Bob"
    assert author(forward_sender_name="Zoe", forward_date=0) == "Zoe"
    assert author() is None


def test_an_edit_comes_back_marked_with_the_edited_message_id() -> None:
    inbound = inbound_from_update({"update_id": 5, "edited_message": message_update("fixed")["message"]}, BOT, GROUPS)
    assert inbound is not None and inbound.text == "fixed" and inbound.message_id == "7"
    assert inbound.edited and inbound.attachment is None and inbound.notice is None
    fresh = inbound_from_update(message_update("fixed"), BOT, GROUPS)
    assert fresh is not None and not fresh.edited
    photo = message_update(photo=[{"file_id": "f", "width": 1, "height": 1}])["message"]
    assert inbound_from_update({"update_id": 6, "edited_message": photo}, BOT, GROUPS) is None


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("video_note", "video messages"),
        ("video", "watch videos"),
    ],
)
def test_media_without_caption_gets_a_notice(field: str, words: str) -> None:
    media: dict[str, Any] = {field: {"file_id": "f"}}
    inbound = inbound_from_update(message_update(**media), BOT, GROUPS)
    assert inbound is not None and inbound.text == ""
    assert inbound.notice is not None and words in inbound.notice and inbound.attachment is None


def test_only_the_photos_of_an_album_carry_its_id() -> None:
    photo = message_update(photo=[{"file_id": "f", "width": 1, "height": 1}], media_group_id="77")
    document = {"file_id": "d", "file_name": "report.pdf", "mime_type": "application/pdf"}
    inbound = inbound_from_update(photo, BOT, GROUPS)
    assert inbound is not None and inbound.media_group == "77"
    # Files sent at once are each read: none joins another's turn.
    inbound = inbound_from_update(message_update(document=document, media_group_id="78"), BOT, GROUPS)
    assert inbound is not None and inbound.attachment is not None and inbound.media_group is None


def test_a_document_carries_what_the_pipeline_needs_to_fetch_and_read_it() -> None:
    document = {"file_id": "f1", "file_unique_id": "u", "file_name": "report.pdf", "mime_type": "application/pdf",
                "file_size": 2048}  # fmt: skip
    inbound = inbound_from_update(message_update(document=document), BOT, GROUPS)
    assert inbound is not None and inbound.text == "" and inbound.notice is None
    assert inbound.attachment == Attachment("document", "f1", "application/pdf", 2048, "report.pdf")
    captioned = inbound_from_update(message_update(document=document, caption="summarise it"), BOT, GROUPS)
    assert captioned is not None and captioned.text == "summarise it"
    assert captioned.attachment == inbound.attachment


@pytest.mark.parametrize(
    "update",
    [
        message_update(sticker={"file_id": "s", "emoji": "👍"}),
        message_update(new_chat_members=[{"id": 5, "is_bot": False, "first_name": "B"}]),
        {"update_id": 1, "channel_post": {"message_id": 1, "chat": {"id": -100, "type": "channel"}, "text": "x"}},
        message_update("from a bot", **FROM_ANOTHER_BOT),
    ],
    ids=["sticker", "service message", "channel post", "another bot"],
)
def test_what_is_ignored_by_design(update: dict[str, Any]) -> None:
    assert inbound_from_update(update, BOT, GROUPS) is None


def test_either_message_of_a_group_upgrade_is_the_move_and_no_message() -> None:
    moved_to = message_update(chat_id=-4001, chat_type="group", migrate_to_chat_id=-1004001)
    # The supergroup's message may come from the group itself (`sender_chat`) rather than from a person.
    moved_from = message_update(chat_id=-1004001, chat_type="supergroup", migrate_from_chat_id=-4001)
    del moved_from["message"]["from"]
    move = ChatMove("telegram", "-4001", "-1004001")
    assert chat_move_from_update(moved_to) == chat_move_from_update(moved_from) == move
    assert (move.old_session_id, move.new_session_id) == ("telegram:-4001", "telegram:-1004001")
    assert inbound_from_update(moved_to, BOT, GROUPS) is None
    assert inbound_from_update(moved_from, BOT, GROUPS) is None
    assert chat_move_from_update(group("@test_bot hello")) is None
    assert chat_move_from_update({"update_id": 1, "edited_message": moved_to["message"]}) is None


def group(text: str, **fields: Any) -> dict[str, Any]:
    return message_update(text, chat_id=-100555, chat_type="supergroup", **fields)


def test_a_message_in_a_forum_topic_names_the_topic_and_the_general_topic_names_none() -> None:
    forum: dict[str, Any] = {"chat_id": -1001234567, "chat_type": "supergroup"}
    opening = {"message_id": 5, "date": 0, "chat": {"id": -1001234567, "type": "supergroup"},
               "from": {"id": 99, "is_bot": True, "first_name": "Bot"}, "message_thread_id": 5,
               "is_topic_message": True, "forum_topic_created": {"name": "Trips", "icon_color": 0}}  # fmt: skip
    update = message_update(
        "@test_bot hi", **forum, message_thread_id=5, is_topic_message=True, reply_to_message=opening
    )
    inbound = inbound_from_update(update, BOT, GROUPS)
    assert inbound is not None
    assert (inbound.chat_id, inbound.session_id) == ("-1001234567:topic:5", "telegram:-1001234567:topic:5")
    # The topic's opening message, which Telegram gives as the message replied to, is no reply (even to the
    # bot, when the bot opened the topic): no quote, and a message that does not name the bot is not for it.
    assert (inbound.quote, inbound.reply_to) == (None, None)
    unnamed = message_update("hi all", **forum, message_thread_id=5, is_topic_message=True, reply_to_message=opening)
    assert inbound_from_update(unnamed, BOT, GROUPS) is None
    general = inbound_from_update(message_update("@test_bot hi", **forum), BOT, GROUPS)
    assert general is not None and general.session_id == "telegram:-1001234567"


def test_a_topic_is_named_by_its_opening_and_by_a_rename() -> None:
    forum: dict[str, Any] = {"chat_id": -1001234567, "chat_type": "supergroup"}
    opening = {"message_id": 5, "date": 0, "chat": {"id": -1001234567, "type": "supergroup"},
               "forum_topic_created": {"name": "Trips", "icon_color": 0}}  # fmt: skip
    in_topic = message_update("hi all", **forum, message_thread_id=5, is_topic_message=True, reply_to_message=opening)
    assert named_topic(in_topic) == TopicName(-1001234567, 5, "Trips", renamed=False)
    renamed = message_update(**forum, message_thread_id=5, is_topic_message=True, forum_topic_edited={"name": "Oslo"})
    assert named_topic(renamed) == TopicName(-1001234567, 5, "Oslo", renamed=True)
    # A reply within the topic names no topic; nor does a message of General.
    replying = message_update("yes", **forum, message_thread_id=5, is_topic_message=True,
                              reply_to_message={"message_id": 6, "text": "go?"})  # fmt: skip
    assert named_topic(replying) is None and named_topic(message_update("hi", **forum)) is None


def test_a_reply_thread_outside_a_forum_is_no_topic() -> None:
    # In a supergroup without topics a reply carries its thread's id, but no `is_topic_message`.
    replied = {"message_id": 3, "date": 0, "chat": {"id": -1001234567, "type": "supergroup"},
               "from": {"id": 99, "is_bot": True, "first_name": "Bot"}, "text": "earlier"}  # fmt: skip
    update = message_update(
        "and now?", chat_id=-1001234567, chat_type="supergroup", message_thread_id=3, reply_to_message=replied
    )
    inbound = inbound_from_update(update, BOT, GROUPS)
    assert inbound is not None and inbound.chat_id == "-1001234567" and inbound.reply_to == "3"


def test_in_a_group_only_what_is_addressed_to_the_bot_counts() -> None:
    assert inbound_from_update(group("hello all"), BOT, GROUPS) is None
    mentioned = inbound_from_update(group("hey @Test_Bot, what's up?"), BOT, GROUPS)
    assert mentioned is not None and mentioned.text == "hey , what's up?" and mentioned.is_group
    reply = inbound_from_update(group("and you?", reply_to_message={"message_id": 1, "from": {"id": 99}}), BOT, GROUPS)
    assert reply is not None and reply.text == "and you?"
    not_to_us = group("and you?", reply_to_message={"message_id": 1, "from": {"id": 5}})
    assert inbound_from_update(not_to_us, BOT, GROUPS) is None
    command = inbound_from_update(group("/status"), BOT, GROUPS)
    assert command is not None and command.text == "/status" and command.user_id == "1001"
    assert inbound_from_update(group("/status@test_bot"), BOT, GROUPS) is not None
    assert inbound_from_update(group("/status@other_bot"), BOT, GROUPS) is None


def test_a_photo_of_an_album_addressed_to_the_bot_is_for_the_bot_in_a_group() -> None:
    photo = [{"file_id": "f", "width": 1, "height": 1}]
    update = group("", photo=photo, media_group_id="77")
    del update["message"]["text"]
    assert album_key(update) == "-100555/77"
    assert inbound_from_update(update, BOT, GROUPS) is None
    inbound = inbound_from_update(update, BOT, GROUPS, album_addressed=True)
    assert inbound is not None and inbound.media_group == "77" and inbound.attachment is not None
    # An edit is never part of an album; nothing is for a bot told to stay out of groups.
    assert album_key(message_update(photo=photo, media_group_id="77")) == "42/77"
    assert album_key({"update_id": 1, "edited_message": update["message"]}) is None
    assert album_key(group("hello")) is None
    assert inbound_from_update(update, BOT, TelegramGroupsConfig(enabled=False), album_addressed=True) is None


def test_group_gating_is_configurable() -> None:
    quiet = TelegramGroupsConfig(answer_mentions=False, answer_commands=False)
    assert inbound_from_update(group("@test_bot hi"), BOT, quiet) is None
    assert inbound_from_update(group("/status"), BOT, quiet) is None
    everything = TelegramGroupsConfig(answer_all_messages=True)
    assert inbound_from_update(group("hello all"), BOT, everything) is not None
    assert inbound_from_update(group("@test_bot hi"), BOT, TelegramGroupsConfig(enabled=False)) is None


def test_a_mention_alone_keeps_its_text() -> None:
    inbound = inbound_from_update(group("@test_bot"), BOT, GROUPS)
    assert inbound is not None and inbound.text == "@test_bot"


def test_a_forwarded_command_does_not_address_the_bot_in_a_group() -> None:
    origin = {"type": "hidden_user", "date": 0, "sender_user_name": "Bob"}
    assert inbound_from_update(group("/help", forward_origin=origin), BOT, GROUPS) is None
    mentioned = inbound_from_update(group("@test_bot /help", forward_origin=origin), BOT, GROUPS)
    assert mentioned is not None and mentioned.forwarded_from == "Bob" and not mentioned.may_be_command

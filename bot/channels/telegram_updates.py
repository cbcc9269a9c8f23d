"""Telegram updates → `InboundMessage`s: what a person sent, whether it is for us, and what we ignore.

Works on the raw Bot API JSON (an Update as a dict), so both backends and the webhook listener share it.

What becomes a message, and what does not:

- text, and the caption of a photo, document, video or voice note (captions count as text);
- a document (a file) carries its file id, name, size and type (`FILE_ID` ...): the pipeline reads it
  into the knowledge graph, and its caption, if any, is answered as text;
- other media without a caption get a short notice that only text is understood (`CHANNEL_NOTICE`),
  sent after the access check and in the chat's order, without a model call;
- stickers, edits of earlier messages, service messages (members joining, pins ...) and anything
  else are ignored by design: answering them would be noise;
- in groups only messages addressed to the bot count (see `TelegramGroupsConfig`): a mention of
  @bot_username, a reply to the bot, or a command; a command for another bot (`/help@other_bot`) never.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from bot.channels.base import CHANNEL_NOTICE, FILE_ID, FILE_MIME, FILE_NAME, FILE_SIZE
from bot.domain.inbound import InboundMessage
from bot.settings import TelegramGroupsConfig

log = logging.getLogger(__name__)

CHANNEL_TYPE = "telegram"
# The update kinds the bot asks Telegram for (getUpdates / setWebhook `allowed_updates`).
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
GROUP_CHAT_TYPES = frozenset({"group", "supergroup"})

_CAPTIONED_MEDIA = ("photo", "document", "video", "animation", "audio", "voice")
# Media the bot cannot understand yet, and what it says about them.
_NOTICES = {
    "photo": "I can't see images yet. Add a caption or describe the picture in words, and I'll help.",
    "voice": "I can't listen to voice messages yet. Please type your message.",
    "audio": "I can't listen to audio yet. Please type your message.",
    "video_note": "I can't watch video messages yet. Please type your message.",
    "video": "I can't watch videos yet. Please describe what you need in words.",
    "animation": "I can't watch animations yet. Please type your message.",
    "document": "I can't open files yet. Paste the text you want me to read, or ask in a caption.",
    "location": "I can only read text messages. Please type what you need.",
    "venue": "I can only read text messages. Please type what you need.",
    "contact": "I can only read text messages. Please type what you need.",
    "poll": "I can only read text messages. Please type what you need.",
}
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@([A-Za-z0-9_]+))?(?=\s|$)")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is on Telegram (from getMe): needed to recognise mentions and replies to it."""

    id: int
    username: str


def inbound_from_update(
    update: dict[str, Any], bot: BotIdentity, groups: TelegramGroupsConfig
) -> InboundMessage | None:
    """The message a person sent in `update`, or None when the update is ignored by design."""
    message = update.get("message")
    if not isinstance(message, dict):
        if "edited_message" in update:
            log.debug("[Telegram] Ignored an edit of an earlier message (update %s)", update.get("update_id"))
        return None
    chat = message.get("chat") or {}
    sender = message.get("from") or {}
    if not chat or not sender or sender.get("is_bot"):
        return None
    is_group = chat.get("type") in GROUP_CHAT_TYPES
    if chat.get("type") not in GROUP_CHAT_TYPES and chat.get("type") != "private":
        return None
    text, entities, kind = _content(message)
    if kind is None:
        return None  # stickers, service messages and other things not worth an answer
    if is_group:
        if not groups.enabled:
            return None
        addressed, text = _addressed_in_group(message, text, entities, bot, groups)
        if not addressed:
            return None
    extra: dict[str, str] = {}
    document = message.get("document")
    if kind == "document" and isinstance(document, dict) and document.get("file_id"):
        # A file to read: the pipeline fetches it (`Channel.download`) and files it in the knowledge graph.
        extra.update({
            FILE_ID: str(document["file_id"]),
            FILE_NAME: str(document.get("file_name") or "document"),
            FILE_SIZE: str(int(document.get("file_size") or 0)),
            FILE_MIME: str(document.get("mime_type") or ""),
        })  # fmt: skip
    elif not text:
        extra[CHANNEL_NOTICE] = _NOTICES[kind]
    if text and kind != "text":
        extra["attachment"] = kind
    return InboundMessage(
        channel_type=CHANNEL_TYPE,
        chat_id=str(chat["id"]),
        user_id=str(sender["id"]),
        text=text,
        message_id=str(message.get("message_id")),
        username=sender.get("username"),
        is_group=is_group,
        dedup_key=str(update.get("update_id")),
        extra=extra,
    )


def _content(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str | None]:
    """(text, its entities, kind): kind is "text", a media kind, or None for what is ignored."""
    if isinstance(message.get("text"), str):
        return message["text"], list(message.get("entities") or []), "text"
    for kind in _CAPTIONED_MEDIA:
        if kind in message:
            caption = message.get("caption")
            if isinstance(caption, str) and caption.strip():
                return caption, list(message.get("caption_entities") or []), kind
            return "", [], kind
    for kind in _NOTICES:
        if kind in message:
            return "", [], kind
    return "", [], None


def _addressed_in_group(
    message: dict[str, Any],
    text: str,
    entities: list[dict[str, Any]],
    bot: BotIdentity,
    groups: TelegramGroupsConfig,
) -> tuple[bool, str]:
    """Whether a group message is for the bot, and its text with the bot's @mention taken out."""
    handle = f"@{bot.username}".lower()
    command = _COMMAND.match(text)
    if command is not None:
        target = command.group(1)
        if target is not None and target.lower() != bot.username.lower():
            return False, text  # a command for another bot in the same group
        if groups.answer_commands:
            return True, text
    mentioned = any(
        _entity_text(text, entity).lower() == handle for entity in entities if entity.get("type") == "mention"
    )
    if not mentioned and not entities:
        mentioned = handle in text.lower()
    if mentioned and groups.answer_mentions:
        return True, _without_mention(text, bot.username)
    reply_to = message.get("reply_to_message") or {}
    if groups.answer_replies and (reply_to.get("from") or {}).get("id") == bot.id:
        return True, text
    if groups.answer_all_messages:
        return True, _without_mention(text, bot.username) if mentioned else text
    return False, text


def _entity_text(text: str, entity: dict[str, Any]) -> str:
    """The part of `text` an entity covers; entity offsets count UTF-16 code units."""
    encoded = text.encode("utf-16-le")
    start, length = int(entity.get("offset", 0)), int(entity.get("length", 0))
    return encoded[start * 2 : (start + length) * 2].decode("utf-16-le", errors="replace")


def _without_mention(text: str, username: str) -> str:
    """`text` without the bot's @mention; the mention alone (just "@bot") stays as it is."""
    stripped = re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE)
    stripped = re.sub(r"[ \t]{2,}", " ", stripped).strip()
    return stripped or text

"""Telegram updates → `InboundMessage`s: what a person sent, whether it is for us, and what we ignore.

Works on the raw Bot API JSON (an Update as a dict), so both backends and the webhook listener share it.

What becomes a message, and what does not:

- text, and the caption of a photo, document, video or voice note (captions count as text), with the
  address of each hidden link (words that open a URL) written out as Markdown;
- a photo carries the largest size within the pixel budget as an image `Attachment` (with its pixel
  size), and so does an image sent as a file (a JPEG, PNG, WebP or GIF document): both go to the model
  as images; a photo of an album (several sent at once) carries the album's id (`media_group`), so the
  pipeline answers the album as one message;
- a voice note or audio file carries its file as an audio `Attachment`: the pipeline has it transcribed;
- another document (a file) carries its file id, name, size and type as a document `Attachment`: the
  pipeline reads it into the knowledge graph, and its caption, if any, is answered as text;
- a reply carries the quoted text and its author (`quote`), Telegram's partial quote when the person
  picked one;
- a forwarded message carries who wrote it (`forwarded_from`): a person, or the group or channel it
  was posted in;
- an edit of an earlier text or caption comes back as a message marked `edited` with the edited
  message's id: the pipeline replaces the queued text or handles it as a correction;
- a contact, a place, a location or a poll is given to the model as a line of text (`[Contact: Zoe Roy,
  +336…]`); a live location moving on (an edit of its message) is not a new message;
- other media without a caption get a short notice that only text is understood (`notice`),
  sent after the access check and in the chat's order, without a model call;
- a basic group upgraded to a supergroup (the service messages with `migrate_to_chat_id`, in the old
  group, and `migrate_from_chat_id`, in the new) is no message but a `ChatMove` (`chat_move_from_update`);
- stickers, other service messages (members joining, pins ...) and anything else are ignored by design:
  answering them would be noise;
- in groups only messages addressed to the bot count (see `TelegramGroupsConfig`): a mention of
  @bot_username, a reply to the bot, or a command; a command for another bot (`/help@other_bot`) never.
  An album is addressed as a whole: only one of its messages carries the caption that mentions the bot,
  and the channel says which albums are (`album_key`, `album_addressed`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from bot.domain.chat_move import ChatMove
from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.message import Quote
from bot.domain.session import topic_chat_id
from bot.settings import TelegramGroupsConfig

log = logging.getLogger(__name__)

CHANNEL_TYPE = "telegram"
# The update kinds the bot asks Telegram for (getUpdates / setWebhook `allowed_updates`).
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
GROUP_CHAT_TYPES = frozenset({"group", "supergroup"})

# An animation (a GIF) comes with a `document` too, for backward compatibility (as the Bot API says of
# Message.animation): the specific kinds are looked for before the file.
_CAPTIONED_MEDIA = ("photo", "animation", "video", "audio", "voice", "document")
# Media the bot cannot understand yet, and what it says about them.
_NOTICES = {
    "video_note": "I can't watch video messages yet. Please type your message.",
    "video": "I can't watch videos yet. Please describe what you need in words.",
    "animation": "I can't watch animations yet. Please type your message.",
    "document": "I can't open files yet. Paste the text you want me to read, or ask in a caption.",
}
OTHER_CONTENT_NOTICE = "I can only read text messages. Please type what you need."
# Images sent as a file that the model is shown as images (other files are read as documents).
IMAGE_FILE_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp",
                    ".gif": "image/gif"}  # fmt: skip
# The quoted text of a reply is cut to this many characters before it reaches the model.
QUOTE_MAX_CHARS = 500
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@([A-Za-z0-9_]+))?(?=\s|$)")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is on Telegram (from getMe): needed to recognise mentions and replies to it."""

    id: int
    username: str


def chat_move_from_update(update: dict[str, Any]) -> ChatMove | None:
    """The group upgrade an update's service message tells of, whichever of its two messages it is."""
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat_id = (message.get("chat") or {}).get("id")
    moved_to, moved_from = message.get("migrate_to_chat_id"), message.get("migrate_from_chat_id")
    if not isinstance(chat_id, int):
        return None
    if isinstance(moved_to, int) and moved_to != chat_id:
        return ChatMove(CHANNEL_TYPE, str(chat_id), str(moved_to))
    if isinstance(moved_from, int) and moved_from != chat_id:
        return ChatMove(CHANNEL_TYPE, str(moved_from), str(chat_id))
    return None


class TopicName(NamedTuple):
    """The name of a forum topic, as an update tells it."""

    chat_id: int
    thread_id: int
    name: str
    # A rename (`forum_topic_edited`), rather than the name the topic was opened with.
    renamed: bool


def named_topic(update: dict[str, Any]) -> TopicName | None:
    """The name of the forum topic a message was sent in, when the update tells it: a topic's message that
    replies to none carries the topic's opening (`forum_topic_created`) as `reply_to_message`, and a topic
    renamed says so in a service message (`forum_topic_edited`)."""
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat_id, thread = (message.get("chat") or {}).get("id"), message.get("message_thread_id")
    if not isinstance(chat_id, int) or not isinstance(thread, int) or message.get("is_topic_message") is not True:
        return None
    replied = message.get("reply_to_message")
    opening = replied.get("forum_topic_created") if isinstance(replied, dict) else None
    for named, renamed in ((message.get("forum_topic_edited"), True), (message.get("forum_topic_created"), False),
                           (opening, False)):  # fmt: skip
        if isinstance(named, dict) and isinstance(named.get("name"), str) and named["name"].strip():
            return TopicName(chat_id, thread, named["name"], renamed)
    return None


def album_key(update: dict[str, Any]) -> str | None:
    """The album (`media_group_id`) a new message belongs to, as a key unique among all chats; None for an edit
    and for a message sent alone."""
    message = update.get("message")
    if not isinstance(message, dict) or not message.get("media_group_id"):
        return None
    return f"{(message.get('chat') or {}).get('id')}/{message['media_group_id']}"


def inbound_from_update(
    update: dict[str, Any],
    bot: BotIdentity,
    groups: TelegramGroupsConfig,
    max_image_pixels: int = 1_600_000,
    *,
    album_addressed: bool = False,
) -> InboundMessage | None:
    """The message a person sent in `update`, or None when the update is ignored by design.

    `max_image_pixels`: of a photo's sizes, the largest within this many pixels is taken (the
    smallest when none is). `album_addressed`: the message belongs to an album of a group that another
    of its messages addressed to the bot, so it is for the bot too.
    """
    message = update.get("message")
    edited = False
    if not isinstance(message, dict):
        message = update.get("edited_message")
        if not isinstance(message, dict):
            return None
        edited = True
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
    if edited and (kind in _DESCRIBED or not text.strip()):
        # Only a changed text or caption is news: a live location moving on is an edit of its message too.
        return None
    forwarded_from = _forwarded_from(message)
    mentioned = False
    if is_group:
        if not groups.enabled:
            return None
        addressed, mentioned = _addressed_in_group(message, text, entities, bot, groups, forwarded_from)
        if not addressed and not (album_addressed and not edited):
            return None
    # The entities' offsets are the text's as it came: the links are written out after they were read.
    text = _with_links(text, entities)
    if mentioned:
        text = _without_mention(text, bot.username)
    attachment = None if edited else _attachment(message, kind, max_image_pixels)
    notice = None if edited or attachment is not None or text else _NOTICES.get(kind, OTHER_CONTENT_NOTICE)
    return InboundMessage(
        channel_type=CHANNEL_TYPE,
        chat_id=topic_chat_id(str(chat["id"]), _topic(message)),
        user_id=str(sender["id"]),
        text=text,
        message_id=str(message.get("message_id")),
        username=sender.get("username"),
        sender_name=display_name(sender),
        is_group=is_group,
        dedup_key=str(update.get("update_id")),
        edited=edited,
        quote=_quoted(message, bot),
        reply_to=_replied_id(message),
        forwarded_from=forwarded_from,
        attachment=attachment,
        media_group=_media_group(message) if attachment is not None and attachment.kind == "image" else None,
        notice=notice,
    )


def _topic(message: dict[str, Any]) -> str | None:
    """The forum topic a message was sent in: a topic of its own is a conversation of its own. None for the
    General topic and outside forums, where a reply's `message_thread_id` names only its reply thread."""
    thread = message.get("message_thread_id")
    if message.get("is_topic_message") is not True or not isinstance(thread, int):
        return None
    return str(thread)


def _media_group(message: dict[str, Any]) -> str | None:
    """The album a photo belongs to, when it was sent with others at once (`media_group_id`). Files and audio
    sent at once are each a message of their own: each is read or transcribed."""
    group = message.get("media_group_id")
    return str(group) if group else None


def display_name(user: dict[str, Any]) -> str | None:
    """A Telegram user's name as their contacts see it: first and last name, else None."""
    name = " ".join(str(user.get(part) or "").strip() for part in ("first_name", "last_name")).strip()
    return name or None


def _attachment(message: dict[str, Any], kind: str, max_image_pixels: int) -> Attachment | None:
    """The file that came with the message: an image, audio or a document; None for anything else."""
    if kind == "photo":
        sizes = [size for size in message.get("photo") or [] if isinstance(size, dict) and size.get("file_id")]
        if sizes:
            chosen = _photo_size(sizes, max_image_pixels)
            return Attachment(
                "image",
                str(chosen["file_id"]),
                "image/jpeg",
                int(chosen.get("file_size") or 0),
                width=int(chosen.get("width") or 0) or None,
                height=int(chosen.get("height") or 0) or None,
            )
    document = message.get("document")
    if kind == "document" and isinstance(document, dict) and document.get("file_id"):
        name = str(document.get("file_name") or "document")
        mime = str(document.get("mime_type") or "")
        size = int(document.get("file_size") or 0)
        image_mime = _image_mime(name, mime)
        if image_mime is not None:
            return Attachment("image", str(document["file_id"]), image_mime, size, name)
        # A file to read: the pipeline fetches it (`Channel.download`) and files it in the knowledge graph.
        return Attachment("document", str(document["file_id"]), mime, size, name)
    audio = message.get(kind)
    if kind in ("voice", "audio") and isinstance(audio, dict) and audio.get("file_id"):
        default_name = "voice.ogg" if kind == "voice" else "audio.mp3"
        return Attachment(
            "audio",
            str(audio["file_id"]),
            str(audio.get("mime_type") or ""),
            int(audio.get("file_size") or 0),
            str(audio.get("file_name") or default_name),
            seconds=int(audio.get("duration") or 0) or None,
        )
    return None


def _photo_size(sizes: list[dict[str, Any]], max_pixels: int) -> dict[str, Any]:
    """The largest of a photo's sizes within `max_pixels`, or the smallest when none fits."""
    by_area = sorted(sizes, key=lambda size: int(size.get("width") or 0) * int(size.get("height") or 0))
    fitting = [size for size in by_area if int(size.get("width") or 0) * int(size.get("height") or 0) <= max_pixels]
    return fitting[-1] if fitting else by_area[0]


def _image_mime(file_name: str, mime: str) -> str | None:
    """The image type of a file sent as a document, when it is one the model can be shown."""
    if mime in IMAGE_FILE_TYPES.values():
        return mime
    if mime and not mime.startswith("application/octet-stream"):
        return None
    suffix = "." + file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    return IMAGE_FILE_TYPES.get(suffix)


def _quoted(message: dict[str, Any], bot: BotIdentity) -> Quote | None:
    """The reply's quoted text and author, when the message replies to one with text."""
    replied, external = _replied(message), message.get("external_reply")
    quote = message.get("quote")
    text = quote.get("text") if isinstance(quote, dict) else None
    if isinstance(replied, dict):
        if not isinstance(text, str) or not text.strip():
            text = replied.get("text") if isinstance(replied.get("text"), str) else replied.get("caption")
        author = replied.get("from") or {}
        name = "you (the assistant)" if author.get("id") == bot.id else _person_name(author)
    elif isinstance(external, dict) and isinstance(external.get("origin"), dict):
        # A reply to a message of another chat: Telegram gives its origin, and its text only as the part quoted.
        name = _origin_name(external["origin"])
    else:
        return None
    if not isinstance(text, str) or not text.strip():
        return None
    return Quote(author=name, text=_cut_quote(text))


def _replied_id(message: dict[str, Any]) -> str | None:
    """The id of the message of this chat the message replies to (a photo replied to is shown again)."""
    replied = _replied(message)
    if not isinstance(replied, dict) or replied.get("message_id") is None:
        return None
    return str(replied["message_id"])


def _replied(message: dict[str, Any]) -> dict[str, Any] | None:
    """The message this one replies to. In a forum topic Telegram gives every message that replies to none
    the topic's opening service message (`forum_topic_created`) as `reply_to_message`: that is no reply."""
    replied = message.get("reply_to_message")
    if not isinstance(replied, dict) or "forum_topic_created" in replied:
        return None
    return replied


def _cut_quote(text: str) -> str:
    return text if len(text) <= QUOTE_MAX_CHARS else text[: QUOTE_MAX_CHARS - 1] + "…"


def _forwarded_from(message: dict[str, Any]) -> str | None:
    """Who wrote a forwarded message: the person, or the group or channel it was posted in (`forward_origin`;
    a Bot API server older than 7.0 says it in `forward_from`, `forward_sender_name`, `forward_from_chat`)."""
    origin = message.get("forward_origin")
    if isinstance(origin, dict):
        return _origin_name(origin)
    if not any(key in message for key in ("forward_from", "forward_sender_name", "forward_from_chat")):
        return None
    return _author_name(
        message.get("forward_from"), message.get("forward_from_chat"), message.get("forward_sender_name")
    )


def _origin_name(origin: dict[str, Any]) -> str:
    """Who wrote a message, from its MessageOrigin (a person, a hidden person, a group, a channel)."""
    chat = origin.get("sender_chat") or origin.get("chat")
    return _author_name(origin.get("sender_user"), chat, origin.get("sender_user_name"))


def _author_name(person: Any, chat: Any, hidden: Any) -> str:
    """The name of a message's author: the person, else the group or channel's title, else the name a person
    who hides their account left."""
    if isinstance(person, dict):
        return _person_name(person)
    if isinstance(chat, dict) and chat.get("title"):
        return str(chat["title"])
    return hidden if isinstance(hidden, str) and hidden.strip() else "someone"


def _person_name(user: dict[str, Any]) -> str:
    """A Telegram user's name as the model is told it: their display name, else @username, else "someone"."""
    return display_name(user) or (f"@{user['username']}" if user.get("username") else "someone")


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
    for kind, describe in _DESCRIBED.items():
        if isinstance(message.get(kind), dict):
            return describe(message[kind]), [], kind
    for kind in _NOTICES:
        if kind in message:
            return "", [], kind
    return "", [], None


def _contact(contact: dict[str, Any]) -> str:
    name = display_name(contact) or "a contact"
    phone = contact.get("phone_number")
    return f"[Contact: {name}, {phone}]" if phone else f"[Contact: {name}]"


def _place(venue: dict[str, Any]) -> str:
    where = ", ".join(str(venue[key]) for key in ("title", "address") if venue.get(key))
    location = venue.get("location")
    return f"[Place: {where} ({_coordinates(location)})]" if isinstance(location, dict) else f"[Place: {where}]"


def _location(location: dict[str, Any]) -> str:
    return f"[Location: {_coordinates(location)}]"


def _coordinates(location: dict[str, Any]) -> str:
    return f"{location.get('latitude')}, {location.get('longitude')}"


def _poll(poll: dict[str, Any]) -> str:
    options = [str(option.get("text")) for option in poll.get("options") or [] if isinstance(option, dict)]
    return f"[Poll: {poll.get('question')} Options: {' / '.join(options)}]"


# What is shared as data rather than typed, given to the model as a line of text. A place comes with its
# location too: it is looked for first.
_DESCRIBED: dict[str, Callable[[dict[str, Any]], str]] = {
    "contact": _contact,
    "venue": _place,
    "location": _location,
    "poll": _poll,
}


def _addressed_in_group(
    message: dict[str, Any],
    text: str,
    entities: list[dict[str, Any]],
    bot: BotIdentity,
    groups: TelegramGroupsConfig,
    forwarded_from: str | None,
) -> tuple[bool, bool]:
    """Whether a group message is for the bot, and whether the bot's @mention is to be taken out of it. A
    forwarded message is never a command: its words are someone else's."""
    handle = f"@{bot.username}".lower()
    command = _COMMAND.match(text) if forwarded_from is None else None
    if command is not None:
        target = command.group(1)
        if target is not None and target.lower() != bot.username.lower():
            return False, False  # a command for another bot in the same group
        if groups.answer_commands:
            return True, False
    mentioned = any(
        _entity_text(text, entity).lower() == handle for entity in entities if entity.get("type") == "mention"
    )
    if not mentioned and not entities:
        mentioned = handle in text.lower()
    if mentioned and groups.answer_mentions:
        return True, True
    reply_to = _replied(message) or {}
    if groups.answer_replies and (reply_to.get("from") or {}).get("id") == bot.id:
        return True, False
    return groups.answer_all_messages, mentioned


def _with_links(text: str, entities: list[dict[str, Any]]) -> str:
    """`text` with the address of each hidden link (a `text_link` entity: words that open a URL) written out
    as Markdown, `[words](url)`: the text alone would lose it. Entity offsets count UTF-16 code units."""
    links = sorted(
        (int(entity.get("offset", 0)), int(entity.get("length", 0)), str(entity["url"]))
        for entity in entities
        if entity.get("type") == "text_link" and entity.get("url")
    )
    if not links:
        return text
    encoded = text.encode("utf-16-le")
    pieces: list[str] = []
    done = 0
    for offset, length, url in links:
        if offset < done:
            continue  # overlapping entities: the first one is kept
        pieces += [_utf16_slice(encoded, done, offset), f"[{_utf16_slice(encoded, offset, offset + length)}]({url})"]
        done = offset + length
    pieces.append(_utf16_slice(encoded, done, None))
    return "".join(pieces)


def _entity_text(text: str, entity: dict[str, Any]) -> str:
    """The part of `text` an entity covers; entity offsets count UTF-16 code units."""
    start, length = int(entity.get("offset", 0)), int(entity.get("length", 0))
    return _utf16_slice(text.encode("utf-16-le"), start, start + length)


def _utf16_slice(encoded: bytes, start: int, end: int | None) -> str:
    """The text between two UTF-16 offsets of `encoded` (UTF-16-LE); `end` None: to the end."""
    return encoded[start * 2 : None if end is None else end * 2].decode("utf-16-le", errors="replace")


def _without_mention(text: str, username: str) -> str:
    """`text` without the bot's @mention; the mention alone (just "@bot") stays as it is."""
    stripped = re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.IGNORECASE)
    stripped = re.sub(r"[ \t]{2,}", " ", stripped).strip()
    return stripped or text

"""The ledger's lines on disk: a received message as a JSON object and back, and the files of the past.

A *received* record holds the message's fields by name (`channel_type`, `chat_id`, `text`, ...), its
turn id (`journal_id`, also the id of its user message in the session), and its typed parts as nested
objects (`quote`, `attachment`, `image`) and lists of them (`album`, `album_images`). Records written
when those parts were strings in an `extra` object (`"imageId"`, `"imagePixels": "WxH"`, `"quoteText"`,
`"edited": "1"` ...) are read into the same typed fields, so a workspace left open by such a run is
resumed as it was.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.message import MediaRef, Quote
from bot.storage.files import read_text_sync
from bot.storage.jsonl import parse_jsonl

log = logging.getLogger(__name__)

_SCALAR_FIELDS = (
    "channel_type", "chat_id", "user_id", "text", "message_id", "username", "sender_name", "is_group", "dedup_key",
    "edited", "notice", "transcribed", "forwarded_from", "media_group", "reply_to",
)  # fmt: skip
_ATTACHMENT_FIELDS = {field.name for field in dataclasses.fields(Attachment)}


def received_record(turn_id: str, inbound: InboundMessage) -> dict[str, Any]:
    """The *received* record's object: the message's fields, its turn id, its typed parts nested."""
    fields: dict[str, Any] = {name: getattr(inbound, name) for name in _SCALAR_FIELDS}
    fields["journal_id"] = turn_id
    if inbound.quote is not None:
        fields["quote"] = inbound.quote.model_dump(by_alias=True)
    if inbound.attachment is not None:
        fields["attachment"] = dataclasses.asdict(inbound.attachment)
    if inbound.image is not None:
        fields["image"] = inbound.image.model_dump(by_alias=True, exclude_none=True)
    if inbound.album:
        fields["album"] = [dataclasses.asdict(attachment) for attachment in inbound.album]
    if inbound.album_images:
        fields["album_images"] = [image.model_dump(by_alias=True, exclude_none=True) for image in inbound.album_images]
    return fields


def received_message(raw: Any) -> tuple[str, InboundMessage] | None:
    """The turn id and message of a *received* record's object; None (logged) when it is unreadable."""
    if not isinstance(raw, dict) or not isinstance(raw.get("journal_id"), str):
        log.warning("[Ledger] Skipped an unreadable record")
        return None
    try:
        fields = {name: raw[name] for name in _SCALAR_FIELDS if name in raw and raw[name] is not None}
        quote = raw.get("quote")
        attachment = raw.get("attachment")
        image = raw.get("image")
        typed: dict[str, Any] = {
            "quote": Quote.model_validate(quote) if isinstance(quote, dict) else None,
            "attachment": attachment_of(attachment) if isinstance(attachment, dict) else None,
            "image": MediaRef.model_validate(image) if isinstance(image, dict) else None,
            "album": tuple(attachment_of(item) for item in raw.get("album") or [] if isinstance(item, dict)),
            "album_images": tuple(
                MediaRef.model_validate(item) for item in raw.get("album_images") or [] if isinstance(item, dict)
            ),
        }
        extra = raw.get("extra")
        if isinstance(extra, dict):
            typed.update(_typed_from_extra({str(key): str(value) for key, value in extra.items()}))
            fields["edited"] = fields.get("edited") or bool(extra.get("edited"))
            fields["notice"] = fields.get("notice") or extra.get("channelNotice") or None
            fields["transcribed"] = fields.get("transcribed") or bool(extra.get("transcribed"))
        return raw["journal_id"], InboundMessage(**fields, **typed)
    except (TypeError, ValueError) as error:
        log.warning("[Ledger] Skipped an unreadable record (%s)", error)
        return None


def attachment_of(raw: dict[str, Any]) -> Attachment:
    """An `Attachment` from its record's object (`dataclasses.asdict`); keys it does not know are left out."""
    return Attachment(**{key: value for key, value in raw.items() if key in _ATTACHMENT_FIELDS})


def _typed_from_extra(extra: dict[str, str]) -> dict[str, Any]:
    """The typed parts a record of the string bag held: its quote, its file, its stored image."""
    typed: dict[str, Any] = {}
    if extra.get("quoteText"):
        typed["quote"] = Quote(author=extra.get("quoteAuthor") or "someone", text=extra["quoteText"])
    # A pixel size was written as "WIDTHxHEIGHT".
    width_text, _, height_text = extra.get("imagePixels", extra.get("mediaPixels", "")).partition("x")
    width, height = _count(width_text) or None, _count(height_text) or None
    if extra.get("imageId"):
        typed["attachment"] = Attachment(
            "image", extra["imageId"], extra.get("imageMime") or "image/jpeg", _count(extra.get("imageSize")),
            width=width, height=height,
        )  # fmt: skip
    elif extra.get("audioId"):
        typed["attachment"] = Attachment(
            "audio", extra["audioId"], extra.get("audioMime", ""), _count(extra.get("audioSize")),
            extra.get("audioName") or "voice.ogg", seconds=_count(extra.get("audioSeconds")) or None,
        )  # fmt: skip
    elif extra.get("fileId"):
        typed["attachment"] = Attachment(
            "document", extra["fileId"], extra.get("fileMime", ""), _count(extra.get("fileSize")),
            extra.get("fileName") or "document",
        )  # fmt: skip
    if extra.get("mediaPath"):
        typed["image"] = MediaRef(
            path=extra["mediaPath"], mime=extra.get("mediaMime") or "image/jpeg", width=width, height=height
        )
    return typed


def _count(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0


def legacy_records(state: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """The records of the inbox journal and Telegram update ids kept before the ledger, as ledger records."""
    records: list[dict[str, Any]] = []
    found: list[Path] = []
    updates = state / "telegram-updates.json"
    text = read_text_sync(updates)
    if text is not None:
        found.append(updates)
        try:
            records.append({"seen": [["telegram", str(int(value))] for value in json.loads(text)["seenUpdateIds"]]})
        except (ValueError, KeyError, TypeError) as error:
            log.warning("[Ledger] Ignoring unreadable %s (%s)", updates, error)
    inbox = state / "inbox.jsonl"
    text = read_text_sync(inbox)
    if text is not None:
        found.append(inbox)
        for record in parse_jsonl(text, inbox):
            if "message" in record:
                records.append({"received": record["message"]})
            elif "edit" in record:
                records.append({"edited": record["edit"], "text": record.get("text")})
            elif "done" in record:
                records.append({"delivered": record["done"]})
            elif isinstance(record.get("journaledKeys"), list):
                records.append({"seen": record["journaledKeys"]})
    if found:
        log.info("[Ledger] Took over %s", ", ".join(path.name for path in found))
    return records, found

"""The image budget: which images the next model call carries.

Only the images of the newest `media.imagesInPrompt` user messages that have any are sent (read from
their files as data URLs); older ones reach the model as a one-line stand-in (`bot.llm.wire`), so a
long conversation with many photos costs the prompt a few images, not all of them. An image two
messages hold (a reply to an earlier photo brings it again) is sent once, with the newer.
"""

from __future__ import annotations

from bot.domain.message import Message, Role
from bot.media.store import MediaStore


async def images_for_prompt(messages: list[Message], store: MediaStore, keep: int) -> dict[str, list[str]]:
    """Data URLs by message id, for the newest `keep` user messages with images (0: none at all);
    `messages` may be the conversation or only its user messages with media."""
    chosen: dict[str, list[str]] = {}
    # An image goes once, with the newest message that has it (a reply to an earlier photo brings it again).
    sent: set[str] = set()
    for message in reversed(messages):
        if len(chosen) >= keep:
            break
        if message.role is not Role.USER or not message.media:
            continue
        urls = [
            url
            for media in message.media
            if media.kind == "image"
            and media.path not in sent
            and (url := await store.data_url(media.path, media.mime)) is not None
        ]
        sent.update(media.path for media in message.media)
        if urls:
            chosen[message.id] = urls
    return chosen

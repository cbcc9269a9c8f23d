"""The image budget: which images the next model call carries.

Only the images of the newest `media.imagesInPrompt` user messages that have any are sent (read from
their files as data URLs); older ones reach the model as a one-line stand-in (`bot.llm.wire`), so a
long conversation with many photos costs the prompt a few images, not all of them.
"""

from __future__ import annotations

from bot.domain.message import Message, Role
from bot.media.store import MediaStore


async def images_for_prompt(messages: list[Message], store: MediaStore, keep: int) -> dict[str, list[str]]:
    """Data URLs by message id, for the newest `keep` user messages with images (0: none at all);
    `messages` may be the conversation or only its user messages with media."""
    chosen: dict[str, list[str]] = {}
    for message in reversed(messages):
        if len(chosen) >= keep:
            break
        if message.role is not Role.USER or not message.media:
            continue
        urls = [
            url
            for media in message.media
            if media.kind == "image" and (url := await store.data_url(media.path, media.mime)) is not None
        ]
        if urls:
            chosen[message.id] = urls
    return chosen

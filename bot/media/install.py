"""What the media package gives the rest of the bot: where images and recordings are kept, whether the
model sees images, and the intake that prepares them for a turn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.llm.client import LlmClient
from bot.media.intake import MediaIntake, VisionSupport
from bot.media.store import MediaStore


@dataclass(frozen=True)
class InstalledMedia:
    """The media store and vision support the tool loop reads, and the intake the router hands media to."""

    store: MediaStore
    vision: VisionSupport
    intake: MediaIntake


def install(workspace_root: Path, llm: LlmClient) -> InstalledMedia:
    store = MediaStore(workspace_root)
    vision = VisionSupport()
    return InstalledMedia(store, vision, MediaIntake(store, llm, vision))

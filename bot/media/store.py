"""`MediaStore`: the images people sent, as files under `workspace/media/{session}/`.

The session JSON holds only a reference (`MediaRef.path`, relative to the workspace); the bytes are
read again and sent as a base64 data URL each time the image goes to the model. So a session with a
hundred photos stays as small as one with a hundred captions.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from pathlib import Path

from bot.storage.files import write_atomic

log = logging.getLogger(__name__)

MEDIA_DIR = "media"
_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif"}


class MediaStore:
    """Saves a chat's images under the workspace and reads them back as data URLs."""

    def __init__(self, workspace_root: Path) -> None:
        self._root = workspace_root

    async def save(self, session_id: str, data: bytes, mime: str) -> str:
        """Write `data` as a new file of the chat; returns its path relative to the workspace."""
        relative = f"{MEDIA_DIR}/{session_id}/{uuid.uuid4().hex}{_EXTENSIONS.get(mime, '.bin')}"
        await write_atomic(self._root / relative, data)
        return relative

    async def data_url(self, relative: str, mime: str) -> str | None:
        """The file as a `data:` URL, or None (logged) when it is gone or outside the media folder."""
        path = (self._root / relative).resolve()
        media_root = (self._root / MEDIA_DIR).resolve()
        if not path.is_relative_to(media_root):
            log.warning("[Media] Refused an image reference outside %s: %s", MEDIA_DIR, relative)
            return None
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except OSError as error:
            log.warning("[Media] Image %s could not be read (%s); a text stand-in is sent", relative, error)
            return None
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"

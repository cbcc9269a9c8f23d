"""The pixel size of an image read from its first bytes (PNG, GIF, JPEG, WebP), without an imaging library.

Telegram gives the size of each photo size it offers, but none for an image sent as a file: the size
is then read from the file's header, so the token budget counts that image by its size too.
"""

from __future__ import annotations

import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (they carry the size); C4, C8 and CC are other segments in that range.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# JPEG markers that stand alone, without a length: start of image, TEM and the restart markers.
_JPEG_STANDALONE = frozenset({0xD8, 0x01, *range(0xD0, 0xD8)})


def pixel_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the image's header, or None when the format is not one of these or is damaged."""
    size: tuple[int, int] | None = None
    if data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        size = (width, height)
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        size = (width, height)
    elif data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size in the first start-of-frame segment, walking the segments (an EXIF thumbnail is skipped
    whole, inside its APP1 segment)."""
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        if marker in _JPEG_FRAMES:
            if position + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return width, height
        if marker == 0xDA or length < 2:  # the image data starts (no frame seen), or a damaged length
            return None
        position += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None

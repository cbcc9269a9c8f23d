"""`pixel_size`: an image file's width and height from its header, for the images Telegram gives no size for."""

from __future__ import annotations

import struct

from bot.media.pixels import PNG_SIGNATURE, pixel_size


def png_header(width: int, height: int) -> bytes:
    return PNG_SIGNATURE + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)


def test_png_and_gif_sizes_are_read_from_the_header() -> None:
    assert pixel_size(png_header(640, 480) + b"rest of the file") == (640, 480)
    assert pixel_size(b"GIF89a" + struct.pack("<HH", 320, 200) + b"\x00" * 10) == (320, 200)


def test_a_jpeg_size_is_found_past_an_exif_segment_with_a_thumbnail() -> None:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    # The EXIF segment holds a thumbnail with a frame of its own: it is skipped whole, by its length.
    thumbnail = b"\xff\xd8\xff\xc0" + struct.pack(">HBHHB", 17, 8, 60, 80, 3) + b"\x00" * 9
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + 6 + len(thumbnail)) + b"Exif\x00\x00" + thumbnail
    frame = b"\xff\xc2" + struct.pack(">HBHHB", 17, 8, 960, 1280, 3) + b"\x00" * 9  # progressive
    assert pixel_size(b"\xff\xd8" + app0 + app1 + frame + b"\xff\xda") == (1280, 960)


def test_webp_sizes_are_read_from_each_chunk_kind() -> None:
    riff = b"RIFF" + b"\x00" * 4 + b"WEBP"
    lossy = riff + b"VP8 " + b"\x00" * 4 + b"\x00" * 6 + struct.pack("<HH", 800, 600)
    bits = (800 - 1) | ((600 - 1) << 14)
    lossless = riff + b"VP8L" + b"\x00" * 4 + b"\x2f" + bits.to_bytes(4, "little")
    extended = riff + b"VP8X" + b"\x00" * 8 + (800 - 1).to_bytes(3, "little") + (600 - 1).to_bytes(3, "little")
    assert pixel_size(lossy) == pixel_size(lossless) == pixel_size(extended) == (800, 600)


def test_anything_else_has_no_size() -> None:
    assert pixel_size(b"") is None
    assert pixel_size(b"\xff\xd8\xff\xe0not really a jpeg") is None
    assert pixel_size(PNG_SIGNATURE + b"truncated") is None
    assert pixel_size(png_header(0, 480)) is None
    assert pixel_size(b"%PDF-1.7 a document") is None

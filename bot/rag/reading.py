"""The text of a document sent in a chat, and its parts for the knowledge graph.

PDF through `pypdf` (its text layer, page by page); plain text, Markdown and other text files decoded as
UTF-8 (Latin-1 when that fails). Everything else is refused with a sentence the user can act on.
"""

from __future__ import annotations

import io
from pathlib import PurePath

from pypdf import PdfReader
from pypdf.errors import PdfReadError

# Telegram lets bots download files of at most 20 MB.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024
# A part of a document indexed on its own: small enough for one extraction call, big enough to keep context.
PART_CHARS = 4000
TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .csv .tsv .json .yaml .yml .toml .ini .log .xml .html .htm .py .js .ts .sh".split()
)
READABLE = "PDF, plain text and Markdown files"


class UnreadableDocument(Exception):
    """The document cannot be read; the message says why, for the user."""


def kind_of(name: str, mime: str) -> str | None:
    """`pdf`, `text`, or None for a file the bot cannot read."""
    suffix = PurePath(name).suffix.lower()
    if suffix == ".pdf" or mime == "application/pdf":
        return "pdf"
    if suffix in TEXT_SUFFIXES or mime.startswith("text/") or mime in ("application/json", "application/x-yaml"):
        return "text"
    return None


def document_text(name: str, mime: str, data: bytes) -> str:
    """The document's text; raises `UnreadableDocument`."""
    kind = kind_of(name, mime)
    if kind == "pdf":
        return _pdf_text(name, data)
    if kind == "text":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
        if not text.strip():
            raise UnreadableDocument(f"{name} is empty")
        return text.replace("\r\n", "\n")
    raise UnreadableDocument(f"I can't read {name}: I can read {READABLE}")


def _pdf_text(name: str, data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnreadableDocument(f"{name} is password-protected: send it without the password")
        pages = [page.extract_text() or "" for page in reader.pages]
    except UnreadableDocument:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as error:
        raise UnreadableDocument(f"{name} is not a PDF I can read ({error})") from error
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text.strip():
        raise UnreadableDocument(f"{name} has no text layer (a scan?): I can only read PDFs with text in them")
    return text


def parts_of(text: str, size: int = PART_CHARS) -> list[str]:
    """The text in parts of at most `size` characters, cut between paragraphs (or lines, or words)."""
    parts: list[str] = []
    current = ""
    for paragraph in text.split("\n\n"):
        paragraph = paragraph.strip()
        while len(paragraph) > size:
            cut = paragraph.rfind("\n", 0, size)
            cut = cut if cut > size // 2 else paragraph.rfind(" ", 0, size)
            cut = cut if cut > size // 2 else size
            pieces = [paragraph[:cut].strip(), paragraph[cut:].strip()]
            if current:
                parts.append(current)
                current = ""
            parts.append(pieces[0])
            paragraph = pieces[1]
        if not paragraph:
            continue
        if current and len(current) + 2 + len(paragraph) > size:
            parts.append(current)
            current = paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        parts.append(current)
    return parts

"""Documents sent in a chat: fetched through the Bot API, read, indexed into the graph, progress shown.

The real Telegram clients against the fake Bot API (getFile and the file URL), LightRAG with the fake
model's extraction; what the user sees is read from the fake's chat.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pypdf import PdfReader, PdfWriter

from tests.channels.telegram_harness import GROUP_MEMBER, OWNER, RunningBot, start_bot
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.rag.helpers import FAST_RAG, lightrag_responder

RAG = {**FAST_RAG, "queryMode": "hybrid", "cosineThreshold": 0.2, "embeddingModel": "local"}
MARTA = "Marta works at the Gulbenkian museum in Lisbon, in the department of ancient coins."


def pdf_with_text(*lines: str) -> bytes:
    """A one-page PDF whose text layer holds `lines` (written by hand: no PDF library writes text)."""
    shown = " ".join(f"({line}) Tj 0 -16 Td" for line in lines)
    stream = f"BT /F1 12 Tf 72 720 Td {shown} ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        " /Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1"))
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def indexed_ids(workspace: Path) -> set[str]:
    """The documents the RAG journal records as indexed (the last line for an id wins)."""
    last: dict[str, str] = {}
    for line in (workspace / "rag" / "documents.jsonl").read_text().splitlines():
        record = json.loads(line)
        last[record["id"]] = record["status"]
    return {doc_id for doc_id, status in last.items() if status == "indexed"}


def blank_pdf() -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_text("secret plans"))))
    writer.encrypt("hunter2")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture
async def bot(tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram) -> Any:
    fake_openai.set_responder(lightrag_responder)
    running = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, "ptb", {"rag": RAG})
    yield running
    await running.stop()


async def last_reply(fake_telegram: FakeTelegram, count: int, timeout: float = 15.0, chat: int = OWNER) -> str:
    return (await fake_telegram.await_messages(chat, count, timeout=timeout))[-1].text


async def wait_for_text(fake_telegram: FakeTelegram, needle: str, timeout: float = 30.0, chat: int = OWNER) -> str:
    """Until a message the user sees (as edited) contains `needle`; returns it."""
    await fake_telegram.await_until(
        lambda: any(needle in text for text in fake_telegram.visible_text(chat)), timeout=timeout, what=needle
    )
    return next(text for text in fake_telegram.visible_text(chat) if needle in text)


async def test_a_text_file_is_read_into_the_graph_with_one_progress_message(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    filler = "\n\n".join(f"Paragraph {n}: notes about the garden, the weather and the week." for n in range(90))
    fake_telegram.push_document(OWNER, content=f"{MARTA}\n\n{filler}".encode(), file_name="notes.md",
                                mime_type="text/markdown")  # fmt: skip
    first = await last_reply(fake_telegram, 1)
    assert first.startswith("Reading notes.md: 0 of 2 parts")
    final = await wait_for_text(fake_telegram, "Read notes.md: 2 parts, in my memory now")
    assert len(fake_telegram.visible_text(OWNER)) == 1  # one message, edited in place
    assert fake_telegram.edits(OWNER)  # progress was edited, not re-sent
    upload_id = final.split("(id ")[1].split(")")[0]

    fake_telegram.push_message(OWNER, "/docs")
    assert f"{upload_id} · notes.md · 2 parts · read" in await last_reply(fake_telegram, 2)
    fake_telegram.push_message(OWNER, "Where does Marta work?")
    await last_reply(fake_telegram, 3)
    system = fake_openai.system_prompts()[-1] or ""
    assert "Gulbenkian" in system.split("# Relevant Memory", 1)[-1]

    fake_telegram.push_message(OWNER, f"/docs forget {upload_id}")
    assert "Forgotten: notes.md (2 parts removed" in await last_reply(fake_telegram, 4)
    fake_telegram.push_message(OWNER, "/docs")
    assert "I have not read any document" in await last_reply(fake_telegram, 5)


async def test_a_pdf_is_read_and_the_same_file_twice_is_read_once(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    pdf = pdf_with_text("Quarterly report", MARTA)
    fake_telegram.push_document(OWNER, content=pdf, file_name="report.pdf", mime_type="application/pdf")
    await wait_for_text(fake_telegram, "Read report.pdf: 1 part, in my memory now")
    fake_telegram.push_document(OWNER, content=pdf, file_name="report-copy.pdf", mime_type="application/pdf")
    assert "I have read report.pdf already (1 part," in await last_reply(fake_telegram, 2)
    assert len(indexed_ids(bot.workspace)) == 1


async def test_the_same_file_sent_in_two_chats_is_each_chats_own(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    # The owner's chat reads into the owner's graph, another person's private chat into a graph of its own.
    fake_telegram.push_document(OWNER, content=MARTA.encode(), file_name="marta.txt", mime_type="text/plain")
    final = await wait_for_text(fake_telegram, "Read marta.txt: 1 part, in my memory now")
    upload_id = final.split("(id ")[1].split(")")[0]
    fake_telegram.push_document(GROUP_MEMBER, content=MARTA.encode(), file_name="marta.txt", mime_type="text/plain")
    await wait_for_text(fake_telegram, f"Read marta.txt: 1 part, in my memory now (id {upload_id})", chat=GROUP_MEMBER)
    assert indexed_ids(bot.workspace) == {f"{upload_id}_001", f"{upload_id}_001_2"}

    fake_telegram.push_message(GROUP_MEMBER, f"/docs forget {upload_id}")
    assert "Forgotten: marta.txt" in await last_reply(fake_telegram, 2, chat=GROUP_MEMBER)
    fake_telegram.push_message(OWNER, "/docs")
    assert f"{upload_id} · marta.txt · 1 part · read" in await last_reply(fake_telegram, 2)
    assert indexed_ids(bot.workspace) == {f"{upload_id}_001"}


async def test_a_line_of_the_uploads_file_that_is_not_an_upload_is_skipped_logged_and_kept(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    uploads = tmp_path / "workspace" / "rag" / "uploads.jsonl"
    uploads.parent.mkdir(parents=True)
    uploads.write_text('not json\n{"id": "file_0123456789ab"}\n')
    caplog.set_level(logging.WARNING)
    fake_openai.set_responder(lightrag_responder)
    running = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, "ptb", {"rag": RAG})
    try:
        fake_telegram.push_document(OWNER, content=MARTA.encode(), file_name="marta.txt", mime_type="text/plain")
        await wait_for_text(fake_telegram, "Read marta.txt: 1 part, in my memory now")
        fake_telegram.push_message(OWNER, "/docs")
        assert "· marta.txt · 1 part · read" in await last_reply(fake_telegram, 2)
    finally:
        await running.stop()
    assert f"Skipped line 1 of {uploads} (not an upload)" in caplog.text
    assert f"Skipped line 2 of {uploads} (not an upload)" in caplog.text
    [read, *kept] = uploads.read_text().splitlines()
    assert json.loads(read)["name"] == "marta.txt" and kept == ["not json", '{"id": "file_0123456789ab"}']


@pytest.mark.parametrize(
    ("content", "name", "mime", "answer"),
    [
        (b"PK\x03\x04 a word file", "letter.docx", "application/msword", "I can't read letter.docx: I can read PDF"),
        (blank_pdf(), "scan.pdf", "application/pdf", "scan.pdf has no text layer (a scan?)"),
        (encrypted_pdf(), "locked.pdf", "application/pdf", "locked.pdf is password-protected"),
        (b"x" * (20 * 1024 * 1024 + 1), "huge.txt", "text/plain", "huge.txt is 20 MB: Telegram lets bots download"),
        (b"%PDF-1.4 not really", "broken.pdf", "application/pdf", "broken.pdf is not a PDF I can read"),
    ],
)
async def test_what_cannot_be_read_gets_a_clear_answer(
    bot: RunningBot, fake_telegram: FakeTelegram, content: bytes, name: str, mime: str, answer: str
) -> None:
    fake_telegram.push_document(OWNER, content=content, file_name=name, mime_type=mime)
    assert answer in await last_reply(fake_telegram, 1)
    assert not (bot.workspace / "rag" / "uploads.jsonl").exists()


async def test_a_restart_in_the_middle_resumes_without_reading_anything_twice(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    workspace = tmp_path / "workspace"
    extractions: list[str] = []

    def slow_extraction(request: dict[str, Any]) -> Reply:
        reply = lightrag_responder(request)
        if "---Input Text---" in str(request):
            extractions.append(str(request).split("part ", 1)[1][:8])
            return Reply(text=reply.text, delay=0.4)
        return reply

    fake_openai.set_responder(slow_extraction)
    rag = {**RAG, "batchSize": 1}
    first = await start_bot(workspace, fake_openai, fake_telegram, "ptb", {"rag": rag})
    text = "\n\n".join(f"Section {n}: {MARTA} " + "More words about coins. " * 150 for n in range(3))
    fake_telegram.push_document(OWNER, content=text.encode(), file_name="coins.txt", mime_type="text/plain")
    await fake_telegram.await_until(lambda: len(extractions) >= 1, timeout=15, what="the first part being read")
    await first.stop()
    [upload] = [json.loads(line) for line in (workspace / "rag" / "uploads.jsonl").read_text().splitlines()]
    parts = len(upload["parts"])
    assert parts >= 3

    second = await start_bot(workspace, fake_openai, fake_telegram, "ptb", {"rag": rag})
    try:
        await wait_for_text(fake_telegram, f"Read coins.txt: {parts} parts, in my memory now", timeout=60)
    finally:
        await second.stop()
    indexed = indexed_ids(workspace)
    assert len(indexed) == parts
    full_docs = json.loads((workspace / "rag" / "global" / "kv_store_full_docs.json").read_text())
    assert set(full_docs) == indexed  # each part in the graph once


async def test_the_aiogram_backend_fetches_documents_too(
    tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.set_responder(lightrag_responder)
    running = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, "aiogram", {"rag": RAG})
    try:
        fake_telegram.push_document(OWNER, content=MARTA.encode(), file_name="marta.txt", mime_type="text/plain")
        await wait_for_text(fake_telegram, "Read marta.txt: 1 part, in my memory now")
    finally:
        await running.stop()

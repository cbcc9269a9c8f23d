"""Documents sent in chats with `BOT_DATABASE_URL`: the table `rag_uploads`, shared by every replica.

Two or three replicas' readers, each a `DocumentReader` with its own `RagService` on its own connection to
one database and the fake LightRAG server: the same file sent to two replicas at once is read once (the
row's key decides), a reading left by a replica that died is watched to its end by exactly one other, and
`bot migrate` then `bot export` give `rag/uploads.jsonl` back. Then two `bot run`s with the real Telegram
client: what one read, the other lists and forgets, and a reading the first left when it stopped is
finished by the second, in the same progress message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.rag.journal_table import RagJournalTable
from bot.rag.server import LightRagServerBackend
from bot.rag.service import RagService
from bot.rag.upload_records import DONE, READING, Upload, UploadFile
from bot.rag.upload_table import UploadTable
from bot.rag.uploads import DocumentReader
from bot.settings import RuntimeConfig
from bot.setup.export import export_workspace
from bot.setup.migrate import migrate_workspace
from bot.workspace import Workspace
from tests.channels.telegram_harness import OWNER, free_port, start_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import OpenDatabases
from tests.rag.fake_lightrag_server import FakeLightRagServer
from tests.waiting import wait_until

CHAT = "7"
SESSION = f"test:{CHAT}"
# Three parts of about 3,000 characters each.
REPORT = "\n\n".join(f"Section {n}: Marta keeps the coin collection. " + "More about coins. " * 150 for n in range(3))


@pytest.fixture
async def lightrag_server() -> AsyncIterator[FakeLightRagServer]:
    server = FakeLightRagServer()
    await server.start()
    yield server
    await server.stop()


def config_for(server_url: str, **rag: Any) -> RuntimeConfig:
    return RuntimeConfig.model_validate(
        {"rag": {"backend": "server", "serverUrl": server_url, "batchTokens": 0, **rag}, "memory": {"scope": "chat"}}
    )


@dataclass
class Replica:
    database: Database
    rag: RagService
    reader: DocumentReader


class Replicas:
    """Readers of one database, each with its own connection, knowledge graph service and channel."""

    def __init__(self, url: str) -> None:
        self._databases = OpenDatabases(url)
        self._opened: list[Replica] = []

    async def start(self, server_url: str, channel: RecordingChannel, **rag: Any) -> Replica:
        config = config_for(server_url, **rag)
        database = await self._databases.open()
        rag_service = RagService(
            RagJournalTable(database, lambda: config.rag), LightRagServerBackend(lambda: config.rag, None),
            lambda: config, TokenEstimator(),
        )  # fmt: skip
        reader = DocumentReader(rag_service, UploadTable(database), lambda: config, Clock())
        await reader.resume({channel.channel_type: channel})
        replica = Replica(database, rag_service, reader)
        self._opened.append(replica)
        return replica

    async def close(self) -> None:
        for replica in self._opened:
            await replica.reader.close()
            await replica.rag.close()
        await self._databases.close()


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[Replicas]:
    opened = Replicas(database_url)
    yield opened
    await opened.close()


async def rows(database: Database, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in await database.fetch(query)]


async def test_the_same_file_sent_to_two_replicas_at_once_is_read_once(
    replicas: Replicas, lightrag_server: FakeLightRagServer
) -> None:
    channel = RecordingChannel()
    a, b = await replicas.start(lightrag_server.url, channel), await replicas.start(lightrag_server.url, channel)
    progress_sent = asyncio.Event()
    release = asyncio.Event()
    send_text = channel.send_text

    async def held_send_text(chat_id: str, text: str) -> str | None:
        progress_sent.set()
        await release.wait()  # the first reader holds the key meanwhile
        return await send_text(chat_id, text)

    channel.send_text = held_send_text  # type: ignore[method-assign]
    readings = asyncio.gather(*(r.reader.accept(channel.document(CHAT, "report.txt", REPORT.encode()), channel)
                                for r in (a, b)))  # fmt: skip
    await asyncio.wait_for(progress_sent.wait(), 10)

    async def second_waits_on_the_key() -> bool:
        waiting = await a.database.fetch("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        return len(waiting) == 1

    await wait_until(second_waits_on_the_key)
    release.set()
    await asyncio.wait_for(readings, 10)

    [(upload_id, parts)] = await rows(a.database, "SELECT id, parts FROM rag_uploads")
    assert len(parts) == 3
    assert sorted(parts) == sorted(row[0] for row in await rows(a.database, "SELECT id FROM rag_documents"))
    progress, already = channel.sent[CHAT]
    assert progress == "Reading report.txt: 0 of 3 parts"
    assert already == f"I am reading report.txt already (3 parts, id {upload_id})."


async def test_a_reading_left_by_a_replica_that_died_is_watched_to_its_end_by_one_other(
    replicas: Replicas, lightrag_server: FakeLightRagServer
) -> None:
    channel = RecordingChannel()
    unreachable = f"http://127.0.0.1:{free_port()}"  # A cannot index: its parts stay queued
    a = await replicas.start(unreachable, channel, retryBackoffSeconds=0.1)
    b, c = await replicas.start(lightrag_server.url, channel), await replicas.start(lightrag_server.url, channel)
    await a.reader.accept(channel.document(CHAT, "report.txt", REPORT.encode()), channel)
    assert channel.sent[CHAT] == ["Reading report.txt: 0 of 3 parts"]
    assert await a.rag.flush() == 0
    assert await b.reader.adopt() == [] and await c.reader.adopt() == []  # A runs: its reading is its own

    await a.reader.close()  # A dies: its watching stops, its connections (and presence lock) go
    await a.database.close()
    adopted = await asyncio.gather(b.reader.adopt(), c.reader.adopt())
    assert sorted(len(taken) for taken in adopted) == [0, 1]  # exactly one replica watches it
    watcher, other = (b, c) if adopted[0] else (c, b)
    [(owner, status)] = await rows(b.database, "SELECT owner, status FROM rag_uploads")
    assert (owner, status) == (watcher.database.process_id, READING)

    await asyncio.sleep(0.1)  # A's failed try waits its backoff
    assert await watcher.rag.flush_all() == 3

    async def final_line_shown() -> bool:
        return channel.sent[CHAT][0].startswith("Read report.txt: 3 parts, in my memory now")

    await wait_until(final_line_shown)
    assert len(channel.sent[CHAT]) == 1  # the progress message A sent, edited by the replica that took it
    assert await rows(b.database, "SELECT status FROM rag_uploads") == [(DONE,)]
    assert await other.reader.adopt() == []


async def test_a_document_the_database_cannot_record_is_answered_with_why(
    replicas: Replicas, lightrag_server: FakeLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    channel = RecordingChannel()
    a = await replicas.start(lightrag_server.url, channel)
    await a.database.close()  # the database is out of reach
    await a.reader.accept(channel.document(CHAT, "report.txt", REPORT.encode()), channel)
    assert channel.sent[CHAT] == ["I couldn't keep report.txt: my storage failed. Send it again later."]
    assert "[RAG] Could not record the reading of report.txt for test:7" in caplog.text


async def test_a_reading_whose_database_is_out_of_reach_is_followed_on_with_one_warning(
    replicas: Replicas, lightrag_server: FakeLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    channel = RecordingChannel()
    unreachable = f"http://127.0.0.1:{free_port()}"
    a = await replicas.start(unreachable, channel)
    await a.reader.accept(channel.document(CHAT, "report.txt", REPORT.encode()), channel)
    caplog.set_level(logging.WARNING)
    await a.database.close()
    await asyncio.sleep(1.2)  # two rounds and more
    assert caplog.text.count("[RAG] Could not follow the reading of report.txt (trying again)") == 1
    assert channel.sent[CHAT] == ["Reading report.txt: 0 of 3 parts"]


async def test_migrate_then_export_give_back_the_uploads_file(
    database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    workspace = Workspace(tmp_path / "workspace")
    on_files = UploadFile(workspace.uploads_file)
    uploads = [
        Upload("file_aaa", "notes.md", "telegram:1", "telegram", "1", ["file_aaa_001"], "2026-05-01T09:00:00+00:00",
               "12", DONE),
        Upload("file_bbb", "report.pdf", "telegram:1", "telegram", "1", ["file_bbb_001", "file_bbb_002"],
               "2026-05-01T09:05:00+00:00", "14", READING),
        Upload("file_aaa", "notes.md", "telegram:2", "telegram", "2", ["file_aaa_001_2"], "2026-05-01T09:06:00+00:00",
               "3", "incomplete", ["1 of 1 parts could not be indexed"]),
        Upload("file_ccc", "secret.txt", "telegram:1", "telegram", "1", ["file_ccc_001"], "2026-05-01T09:07:00+00:00"),
    ]  # fmt: skip
    for upload in uploads:
        async with on_files.claim(upload) as claim:
            await claim.keep(upload)
    await on_files.forget("telegram:1", "file_ccc")
    with workspace.uploads_file.open("a") as handle:
        handle.write('not json\n{"id": "file_ddd"}\n')
    kept = workspace.uploads_file.read_text().splitlines()[:3]

    database = Database(database_url)
    await database.start()
    try:
        caplog.set_level(logging.WARNING)
        copied = (await migrate_workspace(workspace, database)).line()
        assert "3 documents sent in chats, 1 documents sent in chats forgotten" in copied
        assert "2 upload lines that are not uploads (skipped; see the log)" in copied
        path = workspace.uploads_file
        assert f"Skipped line 5 of {path} (not an upload)" in caplog.text and f"Skipped line 6 of {path}" in caplog.text
        assert "3 documents sent in chats" in (await migrate_workspace(workspace, database)).line()
        assert await rows(database, "SELECT id, owner FROM rag_uploads ORDER BY position") == [
            ("file_aaa", None), ("file_bbb", None), ("file_aaa", None)
        ]  # fmt: skip
        assert (await UploadTable(database).listed("telegram:1"))[1] == uploads[1]

        exported = Workspace(tmp_path / "exported")
        assert "3 documents sent in chats" in (await export_workspace(database, exported)).line(exported.root)
        assert exported.uploads_file.read_text().splitlines() == kept
    finally:
        await database.close()


# -- two `bot run`s polling the fake Telegram through python-telegram-bot -----------------------------------


async def wait_for_text(fake_telegram: FakeTelegram, needle: str, timeout: float = 30.0) -> str:
    await fake_telegram.await_until(
        lambda: any(needle in text for text in fake_telegram.visible_text(OWNER)), timeout=timeout, what=needle
    )
    return next(text for text in fake_telegram.visible_text(OWNER) if needle in text)


def rag_settings(server_url: str, **rag: Any) -> dict[str, Any]:
    return {"rag": {"backend": "server", "serverUrl": server_url, "batchTokens": 0, **rag}}


async def test_a_reading_one_bot_left_when_it_stopped_is_finished_listed_and_forgotten_by_the_other(
    database_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    lightrag_server: FakeLightRagServer,
) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"  # the first cannot index: the parts stay queued
    first_rag = rag_settings(unreachable, retryBackoffSeconds=0.1)
    first = await start_bot(
        tmp_path / "first", fake_openai, fake_telegram, "ptb", first_rag, bot_database_url=database_url
    )
    second = None
    try:
        second = await start_bot(tmp_path / "second", fake_openai, fake_telegram, "ptb",
                                 rag_settings(lightrag_server.url), bot_database_url=database_url)  # fmt: skip
        fake_telegram.push_document(OWNER, content=REPORT.encode(), file_name="report.txt", mime_type="text/plain")
        await wait_for_text(fake_telegram, "Reading report.txt: 0 of 3 parts")
        await first.stop()  # the second takes the poller lease and the reading over

        final = await wait_for_text(fake_telegram, "Read report.txt: 3 parts, in my memory now")
        assert len(fake_telegram.visible_text(OWNER)) == 1  # the first bot's progress message, edited
        upload_id = final.split("(id ")[1].split(")")[0]
        assert not (tmp_path / "first" / "rag" / "uploads.jsonl").exists()

        fake_telegram.push_message(OWNER, "/docs")
        listing = await wait_for_text(fake_telegram, "Documents I have read here:")
        assert f"{upload_id} · report.txt · 3 parts · read" in listing
        fake_telegram.push_message(OWNER, f"/docs forget {upload_id}")
        await wait_for_text(fake_telegram, "Forgotten: report.txt (3 parts removed from my memory)")
        assert lightrag_server.documents and not any(lightrag_server.documents.values())
        assert second.app.stores.database is not None
        assert await second.app.stores.database.fetch("SELECT id FROM rag_uploads") == []
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


def test_an_upload_line_is_read_back_and_one_with_a_field_of_the_wrong_kind_is_refused() -> None:
    upload = Upload("file_aaa", "notes.md", "telegram:1", "telegram", "1", ["file_aaa_001"], "2026-05-01", "3")
    assert Upload.from_json(upload.to_json()) == upload
    line = upload.to_json()
    for bad in ({**line, "parts": "file_aaa_001"}, {**line, "problems": [3]}, {**line, "status": "lost"}):
        with pytest.raises(ValueError):
            Upload.from_json(bad)
    with pytest.raises(TypeError):
        Upload.from_json({"id": "file_aaa"})

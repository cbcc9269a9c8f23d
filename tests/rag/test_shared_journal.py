"""The knowledge graph's journal in PostgreSQL (`BOT_DATABASE_URL`), shared by every replica of the database.

Two replicas, each a `RagService` on its own connection to one database and a LightRAG server (the fake
one, over HTTP): what one indexed, the other finds and forgets (a memory forgotten through `/memory forget`
on one bot too); a queued exchange is indexed once when both flush together; the claim of a replica that
hangs is taken over once its lease ran out, that of one that died at once; an exchange forgotten while
another replica indexes it leaves the graph all the same, even when that insert's wait runs out or that
replica dies (at the next flush, or a later one while the graph cannot delete); and `bot migrate` then
`bot export` give the journal file back as it was.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.rag.documents import batch_document
from bot.rag.journal_table import RagJournalTable
from bot.rag.server import LightRagServerBackend
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore
from bot.settings import RuntimeConfig
from bot.setup.export import export_workspace
from bot.setup.migrate import migrate_workspace
from bot.workspace import Workspace
from tests.channels.telegram_harness import free_port
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.postgres_server import OpenDatabases
from tests.rag.fake_lightrag_server import FakeLightRagServer
from tests.rag.helpers import rag_of, say, write_runtime_config
from tests.waiting import wait_until

AT = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
INSERT = ("POST", "/documents/text", "chat_test_1")
DELETE = ("DELETE", "/documents/delete_document", "chat_test_1")
# What the exchanges are queued with: each chat's documents in a graph of its own.
QUEUEING = RuntimeConfig.model_validate({"rag": {"minExchangeChars": 10}, "memory": {"scope": "chat"}})


@dataclass
class HeldLightRagServer(FakeLightRagServer):
    """The fake server, whose inserts are answered only once `gate` is set (an extraction that takes a while)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    inserting: asyncio.Event = field(default_factory=asyncio.Event)

    async def _insert(self, request: web.Request) -> web.Response:
        self.inserting.set()
        await self.gate.wait()
        return await super()._insert(request)


@pytest.fixture
async def lightrag_server() -> AsyncIterator[HeldLightRagServer]:
    server = HeldLightRagServer()
    await server.start()
    server.gate.set()
    yield server
    server.gate.set()
    await server.stop()


def config_for(server: FakeLightRagServer, **rag: Any) -> RuntimeConfig:
    return RuntimeConfig.model_validate(
        {
            "rag": {"backend": "server", "serverUrl": server.url, "minExchangeChars": 10, "batchTokens": 0, **rag},
            "memory": {"scope": "chat"},
        }
    )


class Replicas:
    """Replicas of one database: each a `RagService` on its own connection (as a process of its own opens it)."""

    def __init__(self, url: str, server: FakeLightRagServer) -> None:
        self._databases = OpenDatabases(url)
        self._server = server
        self._services: list[RagService] = []

    async def start(self, **rag: Any) -> tuple[RagService, Database]:
        config = config_for(self._server, **rag)
        database = await self._databases.open()
        service = RagService(
            RagJournalTable(database, lambda: config.rag),
            LightRagServerBackend(lambda: config.rag, None),
            lambda: config,
            TokenEstimator(),
        )
        self._services.append(service)
        return service, database

    async def close(self) -> None:
        for service in self._services:
            await service.close()
        await self._databases.close()


@pytest.fixture
async def replicas(database_url: str, lightrag_server: HeldLightRagServer) -> AsyncIterator[Replicas]:
    opened = Replicas(database_url, lightrag_server)
    yield opened
    await opened.close()


@pytest.fixture
async def either_journal(
    replicas: Replicas, lightrag_server: HeldLightRagServer, tmp_path: Path
) -> AsyncIterator[tuple[RagService, RagService]]:
    """A service on the journal file and one on the table, both on `lightrag_server`."""
    config = config_for(lightrag_server)
    on_files = RagService(
        RagDocumentStore(tmp_path / "documents.jsonl"), LightRagServerBackend(lambda: config.rag, None),
        lambda: config, TokenEstimator(),
    )  # fmt: skip
    (on_table, _) = await replicas.start()
    yield on_files, on_table
    await on_files.close()


async def exchange(rag: RagService, user_text: str, message_ids: list[str], second: int = 0, chat: str = "1") -> str:
    at = AT.replace(second=second)
    doc = await rag.enqueue(QUEUEING, f"test:{chat}", at, user_text, "Noted.", message_ids)
    assert doc is not None
    return doc.id


async def texts_in_table(database: Database) -> dict[str, tuple[str, str]]:
    rows = await database.fetch("SELECT id, status, text FROM rag_documents")
    return {str(row["id"]): (str(row["status"]), str(row["text"])) for row in rows}


async def test_an_exchange_one_replica_indexed_is_forgotten_through_another(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    (a, database), (b, _) = await replicas.start(), await replicas.start()
    doc_id = await exchange(a, "My bank PIN is 9731, keep it secret.", ["u1", "a1"])
    assert await a.flush() == 1
    [server_id] = lightrag_server.documents["chat_test_1"]

    # B sees what A indexed: /status, the console's list, and the document of the message.
    assert ((await b.status()).indexed, [doc.id for doc in await b.store.live()]) == (1, [doc_id])
    assert await b.documents_for_messages(["u1"]) == [doc_id]
    assert await b.forget_documents([doc_id]) == [doc_id]

    assert DELETE in lightrag_server.requests and lightrag_server.documents["chat_test_1"] == {}
    assert server_id not in lightrag_server.documents["chat_test_1"]
    assert await texts_in_table(database) == {}  # no row, no text left behind
    assert ((await a.status()).indexed, await a.documents_for_messages(["u1"])) == (0, [])


async def test_a_queued_exchange_is_indexed_once_when_both_replicas_flush_together(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    (a, database), (b, _) = await replicas.start(), await replicas.start()
    queued = [await exchange(a, f"Fact number {n}: the locker code is {n}{n}{n}.", [f"u{n}"], n) for n in range(6)]
    assert (await b.status()).queued == 6

    lightrag_server.gate.clear()  # inserts are held until every exchange is claimed: both flushes run at once
    flushes = asyncio.gather(a.flush(), b.flush())

    async def all_claimed() -> bool:
        return len(await database.fetch("SELECT id FROM rag_documents WHERE claimed_by IS NOT NULL")) == 6

    await wait_until(all_claimed)
    lightrag_server.gate.set()
    assert sum(await flushes) == 6
    assert lightrag_server.requests.count(INSERT) == 6  # each exchange went to the graph once
    assert len(lightrag_server.documents["chat_test_1"]) == 6
    assert {doc_id: status for doc_id, (status, _) in (await texts_in_table(database)).items()} == dict.fromkeys(
        queued, "indexed"
    )
    # Indexed alone, an exchange's text is the graph's now: the row keeps its origin, not its words.
    assert {text for _, text in (await texts_in_table(database)).values()} == {""}


async def test_the_claim_of_a_replica_that_hangs_is_taken_over_after_its_lease(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    # A claim lasts twice `insertTimeoutSeconds`: one second here.
    a, _ = await replicas.start(insertTimeoutSeconds=0.5)
    b, _ = await replicas.start(insertTimeoutSeconds=0.5)
    doc_id = await exchange(a, "The spare key is under the blue flowerpot.", ["u1"])
    claimed_at = time.monotonic()
    [claimed] = await a.store.due(time.time(), 10)  # A claims it, then never gets to index it
    assert claimed.id == doc_id

    assert await b.flush() == 0  # still A's
    assert INSERT not in lightrag_server.requests

    async def taken_over() -> bool:
        return await b.flush() == 1

    await wait_until(taken_over, timeout=5)
    assert time.monotonic() - claimed_at >= 0.95
    assert (await b.status()).indexed == 1 and len(lightrag_server.documents["chat_test_1"]) == 1


async def test_the_claim_of_a_replica_that_died_is_taken_over_at_once(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    a, a_database = await replicas.start()  # a claim lasts 1,200 s here
    b, _ = await replicas.start()
    doc_id = await exchange(a, "The spare key is under the blue flowerpot.", ["u1"])
    [claimed] = await a.store.due(time.time(), 10)
    assert claimed.id == doc_id
    assert await b.flush() == 0  # A runs: its claim holds
    await a_database.close()  # A dies (its connections, and its presence lock, are gone)

    assert await b.flush() == 1
    assert (await b.status()).indexed == 1 and len(lightrag_server.documents["chat_test_1"]) == 1


async def test_replicas_queueing_in_the_same_second_get_ids_of_their_own(replicas: Replicas) -> None:
    (a, _), (b, _) = await replicas.start(), await replicas.start()
    queued = await asyncio.gather(
        *(
            exchange(rag, f"Exchange {n} of the same second, about the garden.", [f"u{n}"])
            for n in range(4)
            for rag in (a, b)
        )
    )
    base = "conv_test_1_20260501_093000"
    assert sorted(queued) == sorted([base, *(f"{base}_{n}" for n in range(2, 9))])
    assert len(await a.store.live()) == 8


async def test_a_failed_insert_leaves_the_exchange_to_any_replica_after_its_backoff(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    unreachable = FakeLightRagServer(port=free_port())  # nothing listens there
    a, database = await replicas.start(serverUrl=unreachable.url, retryBackoffSeconds=0.5)
    b, _ = await replicas.start()
    doc_id = await exchange(a, "The gate code changes on Monday to 5150.", ["u1"])
    assert await a.flush() == 0
    [row] = await database.fetch("SELECT attempts, status, claimed_by FROM rag_documents")
    assert (row["attempts"], row["status"], row["claimed_by"]) == (1, "queued", None)
    assert await b.flush() == 0  # not before its next try

    async def indexed_by_b() -> bool:
        return await b.flush() == 1

    await wait_until(indexed_by_b, timeout=5)
    assert (await b.store.get(doc_id)).status == "indexed"  # type: ignore[union-attr]
    assert len(lightrag_server.documents["chat_test_1"]) == 1


async def test_an_exchange_forgotten_while_another_replica_indexes_it_leaves_the_graph(
    replicas: Replicas, lightrag_server: HeldLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    (a, database), (b, _) = await replicas.start(batchTokens=1100), await replicas.start()
    secret = await exchange(a, "My diary password is Tulip-88.", ["u1"])
    kept = await exchange(a, "Our cat is called Pixel.", ["u2"], 1)
    lightrag_server.gate.clear()
    flushing = asyncio.create_task(a.flush())  # both exchanges in one document, its insert held
    await asyncio.wait_for(lightrag_server.inserting.wait(), 10)

    assert await b.forget_documents(await b.documents_for_messages(["u1"])) == [secret]
    # A row without the text is kept for A until it has recorded its insert.
    assert (await texts_in_table(database))[secret] == ("forgotten", "")
    assert await b.store.live() == [await b.store.get(kept)]

    caplog.set_level(logging.INFO)
    lightrag_server.gate.set()
    assert await asyncio.wait_for(flushing, 10) == 1
    assert "1 documents were forgotten while being indexed" in caplog.text
    assert DELETE in lightrag_server.requests
    [(_, stored)] = lightrag_server.documents["chat_test_1"].items()
    assert "Pixel" in stored["text"] and "Tulip" not in stored["text"]  # the rest indexed again, alone
    assert await texts_in_table(database) == {kept: ("indexed", "")}


async def test_an_insert_that_timed_out_on_one_replica_is_deleted_on_the_server_when_forgotten_through_another(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    # A stops waiting, the server finishes the document all the same: the table never learned its id.
    lightrag_server.hold_processing = True
    (a, database), (b, _) = await replicas.start(insertTimeoutSeconds=0.5), await replicas.start()
    secret = await exchange(a, "My diary password is Tulip-88.", ["u1"])
    assert await a.flush() == 0
    (server_id,) = lightrag_server.documents["chat_test_1"]
    lightrag_server.finish_processing()
    [row] = await database.fetch("SELECT status, tried_as FROM rag_documents")
    assert (row["status"], list(row["tried_as"])) == ("queued", [secret])

    assert await b.forget_documents(await b.documents_for_messages(["u1"])) == [secret]
    assert lightrag_server.deleted == [server_id]
    assert lightrag_server.documents["chat_test_1"] == {}
    assert await texts_in_table(database) == {}


async def test_an_exchange_forgotten_before_the_server_had_it_leaves_the_graph_when_the_insert_times_out(
    replicas: Replicas, lightrag_server: HeldLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    # B's forget finds nothing on the server (A's insert has not reached it); the server then takes the text,
    # and A stops waiting for it: A deletes it.
    lightrag_server.hold_processing = True
    (a, database), (b, _) = await replicas.start(insertTimeoutSeconds=0.5), await replicas.start()
    secret = await exchange(a, "My diary password is Tulip-88.", ["u1"])
    lightrag_server.gate.clear()
    flushing = asyncio.create_task(a.flush())
    await asyncio.wait_for(lightrag_server.inserting.wait(), 10)
    assert await b.forget_documents(await b.documents_for_messages(["u1"])) == [secret]
    assert lightrag_server.deleted == []

    caplog.set_level(logging.INFO)
    lightrag_server.gate.set()
    # The server refuses to delete while it processes the document (busy): A asks again until it has finished.
    await wait_until(lambda: ("DELETE", "/documents/delete_document", "chat_test_1") in lightrag_server.requests)
    lightrag_server.finish_processing()
    assert await asyncio.wait_for(flushing, 10) == 0
    assert "Deleting 1 documents forgotten while being sent to the graph" in caplog.text
    assert lightrag_server.documents["chat_test_1"] == {}
    assert len(lightrag_server.deleted) == 1
    assert await texts_in_table(database) == {}


async def test_an_exchange_forgotten_while_a_replica_that_then_died_sent_it_leaves_the_graph(
    replicas: Replicas, lightrag_server: HeldLightRagServer
) -> None:
    a, a_database = await replicas.start()
    b, database = await replicas.start()
    secret = await exchange(a, "My diary password is Tulip-88.", ["u1"])
    [claimed] = await a.store.due(time.time(), 10)
    document = batch_document([claimed])
    await a.store.mark_tried({document.id: [claimed]})
    assert await b.forget_documents([secret]) == [secret]  # the server has nothing yet
    await LightRagServerBackend(lambda: config_for(lightrag_server).rag, None).insert("chat_test_1", [document])
    await a_database.close()  # A dies once the server has the text, before recording it

    assert await b.flush() == 0
    assert lightrag_server.documents["chat_test_1"] == {}
    assert await texts_in_table(database) == {}


async def test_a_left_behind_exchange_the_graph_cannot_delete_yet_is_deleted_by_a_later_flush(
    replicas: Replicas, lightrag_server: HeldLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    a, a_database = await replicas.start()
    b, database = await replicas.start(insertTimeoutSeconds=0.5, serverTimeoutSeconds=0.3)
    secret = await exchange(a, "My diary password is Tulip-88.", ["u1"])
    [claimed] = await a.store.due(time.time(), 10)
    document = batch_document([claimed])
    await a.store.mark_tried({document.id: [claimed]})
    assert await b.forget_documents([secret]) == [secret]
    await LightRagServerBackend(lambda: config_for(lightrag_server).rag, None).insert("chat_test_1", [document])
    await a_database.close()
    lightrag_server.busy_deletes = 1_000  # the server's pipeline busy past serverTimeoutSeconds

    assert await b.flush() == 0
    assert "The graph may still hold " + secret in caplog.text
    assert len(lightrag_server.documents["chat_test_1"]) == 1
    assert await texts_in_table(database) == {secret: ("forgotten", "")}  # kept, claimed by B for a while
    lightrag_server.busy_deletes = 0

    async def deleted() -> bool:
        await b.flush()
        return lightrag_server.documents["chat_test_1"] == {}

    await wait_until(deleted, timeout=5)
    assert await texts_in_table(database) == {}


async def test_migrate_then_export_give_back_the_same_journal(
    database_url: str, tmp_path: Path, lightrag_server: HeldLightRagServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A journal as a bot on the files leaves it: indexed in a batch, alone, queued, and one forgotten.
    workspace = Workspace(tmp_path / "workspace")
    journal = workspace.rag_dir / "documents.jsonl"
    config = config_for(lightrag_server, batchTokens=1100)
    on_files = RagService(
        RagDocumentStore(journal), LightRagServerBackend(lambda: config.rag, None), lambda: config, TokenEstimator()
    )
    try:
        await exchange(on_files, "Marta lives in Lisbon.", ["u1"])
        await exchange(on_files, "Marta's birthday is on 3 June.", ["u2"], 1)
        await exchange(on_files, "The boiler was serviced in May.", ["u3"], 2, chat="2")
        await exchange(on_files, "The car needs new tyres soon.", ["u4"], 3, chat="3")
        assert await on_files.flush() == 4
        await exchange(on_files, "The plumber is called Rui.", ["u5"], 4)
        await on_files.forget_documents(await on_files.documents_for_messages(["u3"]))
    finally:
        await on_files.close()
    original = journal.read_text()
    assert (
        len(original.splitlines()) == 4
    )  # the forget's rewrite: a batch's two with their text, one without, one queued
    with journal.open("a") as handle:
        handle.write("not json\n" + '{"sessionId": "test:1"}\n')

    database = Database(database_url)
    await database.start()
    try:
        caplog.set_level(logging.WARNING)
        copied = (await migrate_workspace(workspace, database)).line()
        assert "4 knowledge graph documents" in copied
        assert "2 journal lines that are not documents (skipped; see the log)" in copied
        assert f"Skipped line 5 of {journal}" in caplog.text and f"Skipped line 6 of {journal}" in caplog.text
        assert "4 knowledge graph documents" in (await migrate_workspace(workspace, database)).line()
        assert len(await database.fetch("SELECT id FROM rag_documents")) == 4  # nothing copied twice

        exported = Workspace(tmp_path / "exported")
        assert "4 knowledge graph documents" in (await export_workspace(database, exported)).line(exported.root)
        assert (exported.rag_dir / "documents.jsonl").read_text() == original
    finally:
        await database.close()


async def test_a_bot_on_the_database_keeps_its_journal_there_not_in_the_workspace(
    database_url: str,
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    lightrag_server: HeldLightRagServer,
) -> None:
    write_runtime_config(
        workspace_dir, {"backend": "server", "serverUrl": lightrag_server.url}, memory={"enabled": False}
    )
    bot = Application(env_for(workspace_dir, fake_openai, bot_database_url=database_url))
    try:
        await bot.start()
        await say(bot, channel, "1", "Our wifi password is written under the Hermes statue.")
        rag = rag_of(bot)

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert bot.stores.database is not None
        [row] = await bot.stores.database.fetch("SELECT session_id, status, text FROM rag_documents")
        assert (row["session_id"], row["status"]) == ("test:1", "queued") and "Hermes statue" in row["text"]
        assert not (workspace_dir / "rag" / "documents.jsonl").exists()
    finally:
        await bot.stop()


async def test_a_memory_forgotten_through_one_bot_leaves_the_graph_the_other_bot_indexed_it_into(
    database_url: str,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    lightrag_server: HeldLightRagServer,
) -> None:
    bots = []
    for name in ("first", "second"):
        write_runtime_config(tmp_path / name, {"backend": "server", "serverUrl": lightrag_server.url})
        bots.append(Application(env_for(tmp_path / name, fake_openai, bot_database_url=database_url)))
    first, second = bots
    try:
        for bot in bots:
            await bot.start()
        await say(first, channel, "1", "Remember that the bike lock code is 4242.")
        rag = rag_of(first)

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert await rag.flush() == 1
        [(server_id, stored)] = lightrag_server.documents["global"].items()
        assert "4242" in stored["text"]
        assert "RAG (server): 1 documents indexed" in await say(second, channel, "1", "/status")

        listing = await say(second, channel, "1", "/memory bike lock")
        item_id = re.findall(r"^(m[0-9a-f]{11}) · semantic/fact", listing, re.M)[0]
        assert await say(second, channel, "1", f"/memory forget {item_id}") == "Forgotten: the bike lock code is 4242."
        assert ("DELETE", "/documents/delete_document", "global") in lightrag_server.requests
        assert server_id not in lightrag_server.documents["global"]
        assert await rag.store.live() == []
    finally:
        for bot in bots:
            await bot.stop()


async def test_on_the_servers_one_graph_a_chat_recalls_only_its_own_exchanges_on_either_journal(
    either_journal: tuple[RagService, RagService], lightrag_server: HeldLightRagServer
) -> None:
    # Chats of their own for each journal: the one server holds both journals' documents.
    for (mine_chat, other_chat), rag in zip((("1", "2"), ("3", "4")), either_journal, strict=True):
        mine = await exchange(rag, "Marta lives in Lisbon.", ["u1"], chat=mine_chat)
        other = await exchange(rag, "Marta moved to Porto.", ["u2"], 1, chat=other_chat)
        assert await rag.flush() == 2
        assert [doc.id for doc in await rag.store.indexed_in(f"chat_test_{mine_chat}")] == [mine]
        assert [doc.id for doc in await rag.store.indexed_in(f"chat_test_{other_chat}")] == [other]
        recalled = await rag.retrieve(
            config_for(lightrag_server), f"test:{mine_chat}", "Where does Marta live?", lambda: ""
        )
        assert "Marta lives in Lisbon." in recalled.text and "Porto" not in recalled.text


async def test_the_states_of_many_documents_are_read_at_once_on_either_journal(
    either_journal: tuple[RagService, RagService],
) -> None:
    for rag in either_journal:
        indexed = await exchange(rag, "Marta lives in Lisbon.", ["u1"])
        assert await rag.flush() == 1
        forgotten = await exchange(rag, "The boiler was serviced in May.", ["u2"], 1)
        await rag.forget_documents([forgotten])
        queued = await exchange(rag, "The plumber is called Rui.", ["u3"], 2)
        asked = [queued, "conv_unknown", indexed, forgotten]
        assert await rag.store.statuses(asked) == {queued: "queued", indexed: "indexed"}

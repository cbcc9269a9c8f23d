"""`rag.backend: server`: the bot indexes into, retrieves from and deletes in a LightRAG server over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.app import Application
from bot.context.estimator import TokenEstimator
from bot.rag.backend import RagBackendError, RagQuery
from bot.rag.documents import RagDocument
from bot.rag.server import LightRagServerBackend
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore
from bot.settings import RagConfig, RuntimeConfig
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.fake_lightrag_server import FakeLightRagServer
from tests.rag.helpers import rag_of, say, write_runtime_config
from tests.waiting import wait_until

API_KEY = "lightrag-test-key"


@pytest.fixture
async def lightrag_server() -> AsyncIterator[FakeLightRagServer]:
    server = await FakeLightRagServer(api_key=API_KEY).start()
    yield server
    await server.stop()


def service_on(tmp_path: Path, server: FakeLightRagServer, **rag: object) -> tuple[RuntimeConfig, RagService]:
    """The RAG layer on `server` with its journal in `tmp_path`: a graph per chat, exchanges of 10 characters
    and more indexed, a chat's exchanges batched, a failure tried again at once; `rag` over that."""
    config = RuntimeConfig.model_validate(
        {
            "rag": {"backend": "server", "serverUrl": server.url, "minExchangeChars": 10, "batchTokens": 1100,
                    "retryBackoffSeconds": 0.0, **rag},
            "memory": {"scope": "chat"},
        }
    )  # fmt: skip
    backend = LightRagServerBackend(lambda: config.rag, API_KEY)
    return config, RagService(RagDocumentStore(tmp_path / "documents.jsonl"), backend, lambda: config, TokenEstimator())


async def test_the_bot_indexes_retrieves_and_forgets_through_the_server(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, lightrag_server: FakeLightRagServer
) -> None:
    write_runtime_config(
        workspace_dir,
        {"backend": "server", "serverUrl": lightrag_server.url},
        memory={"enabled": False, "scope": "chat"},
    )
    services = Application(env_for(workspace_dir, fake_openai, lightrag_api_key=API_KEY))
    rag = rag_of(services)
    try:
        await say(services, channel, "7", "Our wifi password is written under the Hermes statue.")

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert await rag.flush() == 1
        (doc_id,) = await rag.documents_for_session("test:7")
        stored = lightrag_server.documents["chat_test_7"]
        (server_id,) = stored
        assert server_id.startswith("doc-") and stored[server_id]["file_path"] == doc_id
        assert (await rag.store.get(doc_id)).backend_id == server_id  # type: ignore[union-attr]

        await say(services, channel, "7", "/new")  # the live session would show the fact already
        await say(services, channel, "7", "Where is the wifi password written?")
        assert "Hermes statue" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory")[1]
        assert ("POST", "/query/data", "chat_test_7") in lightrag_server.requests

        assert await rag.forget_documents([doc_id]) == [doc_id]
        assert lightrag_server.documents["chat_test_7"] == {}
        assert ("DELETE", "/documents/delete_document", "chat_test_7") in lightrag_server.requests
        # Indexed at its first try: its server id is known, so the server's list is not read.
        assert not any(path == "/documents/paginated" for _, path, _ in lightrag_server.requests)
    finally:
        await services.stop()
        await rag.close()


async def test_a_server_without_query_data_or_label_search_is_read_through_query_and_its_label_list() -> None:
    server = await FakeLightRagServer(legacy=True).start()
    backend = LightRagServerBackend(lambda: RagConfig(server_url=server.url), None)
    try:
        assert (await backend.health())["status"] == "healthy"
        await backend.insert("global", [RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")])
        found = await backend.query("global", RagQuery("what colour is the Nautilus", "naive", 5, 5, 500))
        assert [s.text for s in found] == ["User: the Nautilus is blue"]
        assert await backend.query("global", RagQuery("unrelated words entirely", "naive", 5, 5, 500)) == []
        # Without the label search, the names are listed and matched by the bot, ranked as the server ranks them.
        await backend.insert("global", [RagDocument("conv_b", "test:1", "global", "User: Nadia rows the Nautilus", "")])
        assert await backend.search_entities("global", "NA", 10) == ["Nadia", "Nautilus"]
        assert await backend.search_entities("global", "utilu", 10) == ["Nautilus"]
        assert [r[1] for r in server.requests].count("/graph/label/search") == 1  # asked once, then listed
        assert [r[1] for r in server.requests].count("/graph/label/list") == 2
    finally:
        await backend.close()
        await server.stop()


async def test_a_wrong_api_key_is_a_clear_error(lightrag_server: FakeLightRagServer) -> None:
    backend = LightRagServerBackend(lambda: RagConfig(server_url=lightrag_server.url), "wrong")
    try:
        with pytest.raises(Exception, match="HTTP 403"):
            await backend.query("global", RagQuery("anything", "naive", 5, 5, 500))
    finally:
        await backend.close()


@pytest.fixture
async def insert_timed_out(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel, lightrag_server: FakeLightRagServer
) -> AsyncIterator[tuple[RagService, str]]:
    """A bot on the server with one exchange whose insert it stopped waiting for, which the server goes on
    processing (until `finish_processing`); the service and the exchange's id."""
    lightrag_server.hold_processing = True
    write_runtime_config(
        workspace_dir,
        {"backend": "server", "serverUrl": lightrag_server.url, "insertTimeoutSeconds": 0.5},
        memory={"enabled": False, "scope": "chat"},
    )
    services = Application(env_for(workspace_dir, fake_openai, lightrag_api_key=API_KEY))
    rag = rag_of(services)
    try:
        await say(services, channel, "7", "My bank PIN is 4821, keep it safe for me.")

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        (doc_id,) = await rag.documents_for_session("test:7")
        assert await rag.flush() == 0
        yield rag, doc_id
    finally:
        await services.stop()
        await rag.close()


async def test_an_insert_retried_after_its_wait_ran_out_is_recorded_with_the_servers_id(
    insert_timed_out: tuple[RagService, str], lightrag_server: FakeLightRagServer
) -> None:
    # The server goes on processing after the bot stopped waiting; the retry finds the name taken.
    rag, doc_id = insert_timed_out
    waited = await rag.store.get(doc_id)
    assert waited is not None and (waited.status, waited.attempts, waited.backend_id) == ("queued", 1, None)
    assert f"{doc_id} still processing on the server" in (waited.last_error or "")  # the backend's reason

    lightrag_server.finish_processing()
    assert await rag.flush() == 1
    (server_id,) = lightrag_server.documents["chat_test_7"]
    assert (await rag.store.get(doc_id)).backend_id == server_id  # type: ignore[union-attr]
    assert ("POST", "/documents/paginated", "chat_test_7") in lightrag_server.requests

    assert await rag.forget_documents([doc_id]) == [doc_id]
    assert lightrag_server.deleted == [server_id]
    assert lightrag_server.documents["chat_test_7"] == {}


async def test_the_same_text_under_a_new_name_is_recorded_as_the_original_and_forgetting_it_deletes_that(
    workspace_dir: Path, fake_openai: FakeOpenAI, lightrag_server: FakeLightRagServer
) -> None:
    write_runtime_config(
        workspace_dir, {"backend": "server", "serverUrl": lightrag_server.url}, memory={"enabled": False}
    )
    services = Application(env_for(workspace_dir, fake_openai, lightrag_api_key=API_KEY))
    rag = rag_of(services)
    config = services.config_store.current_sync()
    text = "Document minutes.txt, part 1 of 1:\nThe board meets on Thursday in the Orion room."
    at = datetime.now(UTC)
    try:
        await rag.enqueue_part(config, "test:7", "file_first_001", text, at)
        assert await rag.flush() == 1
        await rag.enqueue_part(config, "test:7", "file_again_001", text, at)
        assert await rag.flush() == 1
        (original_id,) = lightrag_server.documents["global"]
        assert lightrag_server.documents["global"][original_id]["file_path"] == "file_first_001"
        assert (await rag.store.get("file_again_001")).backend_id == original_id  # type: ignore[union-attr]

        assert await rag.forget_documents(["file_again_001"]) == ["file_again_001"]
        assert lightrag_server.deleted == [original_id]
        # The first copy is not forgotten: it goes back into the graph under its own name.
        first = await rag.store.get("file_first_001")
        assert first is not None and first.status == "indexed"
        assert lightrag_server.documents["global"][first.backend_id or ""]["file_path"] == "file_first_001"
    finally:
        await services.stop()
        await rag.close()


async def test_a_name_the_server_failed_before_is_deleted_there_and_sent_again(
    lightrag_server: FakeLightRagServer,
) -> None:
    backend = LightRagServerBackend(lambda: RagConfig(server_url=lightrag_server.url), API_KEY)
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    try:
        (server_id,) = (await backend.insert("global", [doc])).values()
        lightrag_server.documents["global"][server_id]["status"] = "failed"
        with pytest.raises(RagBackendError, match=f"the server had failed conv_a .*deleted {server_id}"):
            await backend.insert("global", [doc])
        assert lightrag_server.deleted == [server_id]
        assert await backend.insert("global", [doc]) == {"conv_a": server_id}
    finally:
        await backend.close()


async def test_an_older_server_answering_duplicated_is_asked_for_the_id(
    lightrag_server: FakeLightRagServer,
) -> None:
    lightrag_server.legacy = True
    backend = LightRagServerBackend(lambda: RagConfig(server_url=lightrag_server.url), API_KEY)
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    try:
        first = await backend.insert("global", [doc])
        assert await backend.insert("global", [doc]) == first
    finally:
        await backend.close()


async def test_a_deletion_the_busy_server_refuses_is_asked_again_and_never_looks_done(
    lightrag_server: FakeLightRagServer,
) -> None:
    config = RagConfig(server_url=lightrag_server.url, server_timeout_seconds=1.0)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    try:
        (server_id,) = (await backend.insert("global", [doc])).values()
        lightrag_server.busy_deletes = 2
        await backend.delete("global", [server_id])
        assert lightrag_server.deleted == [server_id] and lightrag_server.documents["global"] == {}

        (server_id,) = (await backend.insert("global", [doc])).values()
        lightrag_server.busy_deletes = 1000
        with pytest.raises(RagBackendError, match=f"did not delete {server_id}: busy: Pipeline is busy"):
            await backend.delete("global", [server_id])
        assert server_id in lightrag_server.documents["global"]
    finally:
        await backend.close()


async def test_a_deletion_the_server_runs_past_the_timeout_is_an_error_and_a_new_document_waits_for_it(
    lightrag_server: FakeLightRagServer,
) -> None:
    config = RagConfig(server_url=lightrag_server.url, server_timeout_seconds=0.3)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    try:
        (server_id,) = (await backend.insert("global", [doc])).values()
        lightrag_server.delete_seconds = 1.0
        with pytest.raises(RagBackendError, match=f"started deleting {server_id} and had not finished within 0.3 s"):
            await backend.delete("global", [server_id])
        with pytest.raises(RagBackendError, match=r"HTTP 409.*clearing or deleting documents"):
            await backend.insert("global", [doc])
        await wait_until(lambda: not lightrag_server.deleting)
        assert lightrag_server.documents["global"] == {}
    finally:
        await backend.close()


async def test_a_retry_while_the_server_still_processes_waits_for_the_document_it_holds(
    lightrag_server: FakeLightRagServer,
) -> None:
    lightrag_server.hold_processing = True
    config = RagConfig(server_url=lightrag_server.url, insert_timeout_seconds=0.5)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    doc = RagDocument("conv_a", "test:1", "global", "User: the Nautilus is blue", "")
    try:
        with pytest.raises(RagBackendError, match="conv_a still processing"):
            await backend.insert("global", [doc])
        retry = asyncio.create_task(backend.insert("global", [doc]))
        await asyncio.sleep(0.3)
        assert not retry.done()
        lightrag_server.finish_processing()
        (server_id,) = lightrag_server.documents["global"]
        assert await retry == {"conv_a": server_id}
    finally:
        await backend.close()


async def test_an_exchange_whose_insert_timed_out_is_deleted_on_the_server_when_forgotten_before_any_retry(
    insert_timed_out: tuple[RagService, str], lightrag_server: FakeLightRagServer, workspace_dir: Path
) -> None:
    # The server finishes the document after the bot stopped waiting: the journal never learned its id.
    rag, doc_id = insert_timed_out
    lightrag_server.finish_processing()
    (server_id,) = lightrag_server.documents["chat_test_7"]
    assert lightrag_server.documents["chat_test_7"][server_id]["status"] == "processed"

    (message_id, *_) = (await rag.store.get(doc_id)).message_ids  # type: ignore[union-attr]
    assert await rag.forget_documents(await rag.documents_for_messages([message_id])) == [doc_id]
    assert lightrag_server.deleted == [server_id]
    assert lightrag_server.documents["chat_test_7"] == {}
    assert await rag.store.live() == [] and await rag.store.get(doc_id) is None
    assert "4821" not in (workspace_dir / "rag" / "documents.jsonl").read_text()


async def test_deleting_by_name_deletes_what_the_server_holds_under_each_name_and_skips_the_rest(
    lightrag_server: FakeLightRagServer,
) -> None:
    backend = LightRagServerBackend(lambda: RagConfig(server_url=lightrag_server.url), API_KEY)
    try:
        texts = {"conv_a": "User: my locker code is Quartz 77", "conv_b": "User: the Falcon launch is on Friday"}
        ids = await backend.insert(
            "global", [RagDocument(name, "test:1", "global", t, "") for name, t in texts.items()]
        )
        names = ["conv_never_sent", "conv_a", "conv_b", "conv_a"]
        assert await backend.delete_named("global", names, deleted={ids["conv_b"]}) == [ids["conv_a"]]
        assert lightrag_server.deleted == [ids["conv_a"]]
        assert await backend.delete_named("global", ["conv_a", "conv_never_sent"]) == []
        assert lightrag_server.deleted == [ids["conv_a"]]  # nothing asked of the server for names it does not hold
        assert [record["file_path"] for record in lightrag_server.documents["global"].values()] == ["conv_b"]
    finally:
        await backend.close()


async def test_a_batch_that_timed_out_is_deleted_when_one_member_is_forgotten_and_the_rest_indexed_next(
    tmp_path: Path, lightrag_server: FakeLightRagServer
) -> None:
    lightrag_server.hold_processing = True
    config, rag = service_on(tmp_path, lightrag_server, insertTimeoutSeconds=0.5)
    at = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
    try:
        secret = await rag.enqueue(config, "test:1", at, "My diary password is Tulip-88.", "Noted.", ["u1"])
        kept = await rag.enqueue(config, "test:1", at.replace(second=1), "Our cat is called Pixel.", "Noted.", ["u2"])
        assert secret is not None and kept is not None
        assert await rag.flush() == 0
        (batch_id,) = lightrag_server.documents["chat_test_1"]
        assert lightrag_server.documents["chat_test_1"][batch_id]["file_path"].startswith("convbatch_")
        lightrag_server.finish_processing()

        assert await rag.forget_documents(await rag.documents_for_messages(["u1"])) == [secret.id]
        assert lightrag_server.deleted == [batch_id]
        assert lightrag_server.documents["chat_test_1"] == {}
        assert (await rag.store.get(kept.id)).status == "queued"  # type: ignore[union-attr]

        lightrag_server.hold_processing = False
        assert await rag.flush() == 1
        [(server_id, stored)] = lightrag_server.documents["chat_test_1"].items()
        assert stored["file_path"] == kept.id and "Pixel" in stored["text"] and "Tulip" not in stored["text"]
        assert (await rag.store.get(kept.id)).backend_id == server_id  # type: ignore[union-attr]
    finally:
        await rag.close()


async def test_the_servers_graph_is_read_most_connected_first_and_a_server_that_fails_is_a_clear_error(
    lightrag_server: FakeLightRagServer,
) -> None:
    config = RagConfig(server_url=lightrag_server.url, server_timeout_seconds=1.0)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    text = "User: Marta met Bruno and Carla in Lisbon"  # Marta - Bruno - Carla - Lisbon
    try:
        await backend.insert("global", [RagDocument("conv_a", "test:1", "global", text, "")])
        top = await backend.graph("global", 2)
        assert [entity.name for entity in top.entities] == ["Bruno", "Carla"] and top.total == 4
        assert [(r.source, r.target, r.description) for r in top.relations] == [
            ("Bruno", "Carla", "Bruno and Carla came up together")
        ]
        # The server serves no chunk's text: an entity names the documents it came from.
        assert top.entities[0].sources == () and top.entities[0].documents == ("conv_a",)
        assert ("GET", "/graph/label/list", "global") in lightrag_server.requests
        whole = await backend.graph("global", 400)
        assert len(whole.entities) == whole.total == 4 and len(whole.relations) == 3
        # The search (GET /graph/label/search) reaches every name; a neighbourhood reaches two relations out.
        assert await backend.search_entities("global", "r", 10) == ["Bruno", "Carla", "Marta"]
        assert await backend.search_entities("global", "LIS", 2) == ["Lisbon"]
        assert await backend.search_entities("global", "Oslo", 500) == []  # within the server's limit of 100
        around = await backend.graph("global", 400, around="Marta")
        assert [entity.name for entity in around.entities] == ["Marta", "Bruno", "Carla"] and around.total == 3
        assert not around.truncated and len(around.relations) == 2
        nearest = await backend.graph("global", 2, around="Marta")
        assert [entity.name for entity in nearest.entities] == ["Marta", "Bruno"] and nearest.truncated
        assert (await backend.graph("global", 400, around="Oslo")).entities == ()

        lightrag_server.graph_error = "the graph storage does not answer"
        with pytest.raises(RagBackendError, match=r"GET /graphs.*HTTP 500.*the graph storage does not answer"):
            await backend.graph("global", 400)
        with pytest.raises(RagBackendError, match=r"GET /graph/label/search.*HTTP 500.*does not answer"):
            await backend.search_entities("global", "Marta", 10)
        await lightrag_server.stop()
        with pytest.raises(RagBackendError, match="GET /graphs"):
            await backend.graph("global", 400)
    finally:
        await backend.close()


async def test_a_server_that_takes_a_request_and_goes_quiet_is_a_clear_error_after_its_timeout() -> None:
    async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the request taken, no answer ever
        await asyncio.sleep(30)

    listener = await asyncio.start_server(quiet, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    config = RagConfig(server_url=f"http://127.0.0.1:{port}", server_timeout_seconds=0.3)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    try:
        with pytest.raises(RagBackendError, match=r"GET /graphs: no answer within 0.3 s \(rag.serverTimeoutSeconds\)"):
            await backend.graph("global", 400)
        with pytest.raises(RagBackendError, match="DELETE /documents/delete_document: no answer within"):
            await backend.delete("global", ["conv_a"])
    finally:
        await backend.close()
        listener.close()


async def test_every_chats_graph_is_drawn_as_one_with_the_exchanges_each_entity_came_from(
    tmp_path: Path, lightrag_server: FakeLightRagServer
) -> None:
    config, rag = service_on(tmp_path, lightrag_server)
    at = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
    try:
        # Chat 1's two exchanges go to the server as one batch document; chats 2 and 3 have graphs of their own.
        lisbon = await rag.enqueue(config, "test:1", at, "My sister Marta lives in Lisbon.", "lovely city.", ["u1"])
        orion = await rag.enqueue(config, "test:1", at.replace(second=1), "Orion Labs moved offices.", "ok.", ["u2"])
        porto = await rag.enqueue(config, "test:2", at, "Marta called from Porto yesterday.", "how nice.", ["u3"])
        braga = await rag.enqueue(config, "test:3", at, "Marta drove to Braga.", "sounds fun.", ["u4"])
        assert lisbon is not None and orion is not None and porto is not None and braga is not None
        assert await rag.flush() == 4
        assert len(lightrag_server.documents["chat_test_1"]) == 1

        drawn = await rag.graph(400)
        entities = {entity.name: entity for entity in drawn.entities}
        assert set(entities) == {"Marta", "Lisbon", "Orion", "Labs", "Porto", "Braga"} and drawn.total == 6
        marta = entities["Marta"]
        assert [text.split(": ", 1)[0] for text in marta.descriptions] == ["Marta was mentioned"] * 3
        assert any("Marta called from Porto" in text for text in marta.descriptions)
        # Each exchange of the documents it came from, from the bot's journal (the console keeps those naming it).
        assert set(marta.sources) == {lisbon.text, orion.text, porto.text, braga.text}
        assert entities["Porto"].sources == (porto.text,)
        pairs = {frozenset((r.source, r.target)) for r in drawn.relations}
        assert pairs == {frozenset(pair) for pair in [("Marta", "Lisbon"), ("Lisbon", "Orion"), ("Orion", "Labs"),
                                                      ("Marta", "Porto"), ("Marta", "Braga")]}  # fmt: skip

        # Searched and drawn around an entity across the chats: each name once, each chat's neighbourhood as one.
        assert await rag.search_entities("o", 10) == ["Orion", "Porto", "Lisbon"]
        assert await rag.search_entities("MART", 10) == ["Marta"]
        around = await rag.graph(400, around="Marta")
        assert {entity.name for entity in around.entities} == {"Marta", "Lisbon", "Orion", "Porto", "Braga"}
        marta_around = {e.name: e for e in around.entities}["Marta"]
        assert set(marta_around.sources) == {lisbon.text, orion.text, porto.text, braga.text}
        nearest = await rag.graph(2, around="Marta")  # the entity first, then the nearest (here all as connected)
        assert [entity.name for entity in nearest.entities] == ["Marta", "Braga"] and nearest.truncated

        assert await rag.forget_documents([porto.id]) == [porto.id]
        assert "Porto" not in {entity.name for entity in (await rag.graph(400)).entities}
    finally:
        await rag.close()
    # Read again (a restart): the journal keeps the text of a batch's exchanges, not of one indexed alone.
    _, again = service_on(tmp_path, lightrag_server)
    try:
        marta = next(entity for entity in (await again.graph(400)).entities if entity.name == "Marta")
        alone = "Conversation in chat test:3 on 2026-05-01 09:30 (its text is kept in the graph's backend alone)"
        assert set(marta.sources) == {lisbon.text, orion.text, alone}
    finally:
        await again.close()

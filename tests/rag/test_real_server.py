"""`rag.backend: server` against the real LightRAG server (`lightrag-server` of lightrag-hku), over HTTP.

One server for the module, its model the fake OpenAI server answering LightRAG's prompts as a model would.
The server keeps one graph whatever `LIGHTRAG-WORKSPACE` a request names (only `/health` reads the header),
so each test names its documents and entities apart from the others'.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.app import Application
from bot.rag.backend import RagBackendError, RagQuery
from bot.rag.documents import RagDocument
from bot.rag.server import LightRagServerBackend
from bot.settings import RagConfig
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, message_text
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import lightrag_responder, rag_of, say, write_runtime_config
from tests.rag.real_lightrag_server import RealLightRagServer
from tests.waiting import wait_until

API_KEY = "real-lightrag-key"


class HeldModel:
    """LightRAG's model: the fake OpenAI server with `lightrag_responder`, whose extraction of a text holding
    `held_word` is answered only once `release` is set (a document the server keeps processing)."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.held_word: str | None = None
        self.release = threading.Event()
        fake.set_responder(self._answer)

    def _answer(self, request: dict[str, Any]) -> Reply:
        reply = lightrag_responder(request)
        prompt = " ".join(message_text(m.get("content")) for m in request.get("messages", []))
        if self.held_word is not None and self.held_word in prompt and "---Input Text---" in prompt:
            return Reply(text=reply.text, held_until=self.release)
        return reply


@pytest.fixture(scope="module")
def model() -> Iterator[HeldModel]:
    with FakeOpenAI() as fake:
        held = HeldModel(fake)
        yield held
        held.release.set()


@pytest.fixture(scope="module")
def real_server(model: HeldModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLightRagServer]:
    with RealLightRagServer(model.fake.base_url, API_KEY, tmp_path_factory.mktemp("lightrag-server")) as server:
        yield server


@pytest.fixture
async def backend(real_server: RealLightRagServer) -> AsyncIterator[LightRagServerBackend]:
    config = RagConfig(server_url=real_server.url, server_timeout_seconds=10.0, insert_timeout_seconds=10.0)
    client = LightRagServerBackend(lambda: config, API_KEY)
    yield client
    await client.close()


def naive(text: str) -> RagQuery:
    return RagQuery(text, "naive", 5, 5, 1200)


async def listed(server: RealLightRagServer) -> dict[str, dict[str, Any]]:
    """The server's documents by name (pointer records of refused duplicates left out)."""
    async with httpx.AsyncClient(base_url=server.url, headers={"X-API-Key": API_KEY}) as client:
        body = {"page": 1, "page_size": 200, "sort_field": "file_path", "sort_direction": "asc"}
        answer = (await client.post("/documents/paginated", json=body)).json()
    return {d["file_path"]: d for d in answer["documents"] if not (d.get("metadata") or {}).get("is_duplicate")}


async def held_processing(
    backend: LightRagServerBackend, server: RealLightRagServer, model: HeldModel, doc: RagDocument, word: str
) -> dict[str, Any]:
    """Send `doc`, whose extraction the model holds (its text has `word`), until the backend's wait runs out:
    the server's record of it, still processing."""
    model.held_word, model.release = word, threading.Event()
    with pytest.raises(RagBackendError, match=f"{doc.id} still processing on the server"):
        await backend.insert("global", [doc])
    record = (await listed(server))[doc.id]
    assert record["status"] == "processing"
    return record


async def test_a_document_is_indexed_found_and_deleted(
    backend: LightRagServerBackend, real_server: RealLightRagServer
) -> None:
    assert (await backend.health())["status"] == "healthy"
    text = "User: the Vesper lighthouse keeper is called Anselm."
    ids = await backend.insert("global", [RagDocument("conv_vesper", "test:1", "global", text, "")])
    assert ids["conv_vesper"].startswith("doc-")
    assert (await listed(real_server))["conv_vesper"]["status"] == "processed"

    found = await backend.query("global", naive("who keeps the Vesper lighthouse"))
    assert text in [snippet.text for snippet in found]

    await backend.delete("global", [ids["conv_vesper"]])
    # The server deletes in the background; the bot's delete returns once it has.
    assert "conv_vesper" not in await listed(real_server)
    assert text not in [s.text for s in await backend.query("global", naive("who keeps the Vesper lighthouse"))]
    assert "Anselm" not in await backend.search_entities("global", "Anselm", 10)


async def test_the_same_name_twice_is_recorded_with_the_id_the_server_holds(backend: LightRagServerBackend) -> None:
    doc = RagDocument("conv_tarragon", "test:1", "global", "User: the Tarragon ferry leaves at nine.", "")
    first = await backend.insert("global", [doc])
    # The server refuses the name it holds (HTTP 409); the bot finds the document by its name.
    assert await backend.insert("global", [doc]) == first
    await backend.delete("global", list(first.values()))


async def test_the_same_text_under_a_new_name_is_recorded_as_the_original(
    backend: LightRagServerBackend, real_server: RealLightRagServer
) -> None:
    text = "User: the Quenby orchard is behind the mill."
    original = await backend.insert("global", [RagDocument("conv_quenby_a", "test:1", "global", text, "")])
    again = await backend.insert("global", [RagDocument("conv_quenby_b", "test:1", "global", text, "")])
    assert again == {"conv_quenby_b": original["conv_quenby_a"]}
    assert "conv_quenby_b" not in await listed(real_server)  # only its FAILED pointer record
    await backend.delete("global", list(original.values()))
    assert "conv_quenby_a" not in await listed(real_server)


async def test_a_document_still_processing_is_deleted_once_the_server_has_finished_it(
    real_server: RealLightRagServer, model: HeldModel
) -> None:
    config = RagConfig(server_url=real_server.url, server_timeout_seconds=10.0, insert_timeout_seconds=0.5)
    backend = LightRagServerBackend(lambda: config, API_KEY)
    doc = RagDocument("conv_zephyrine", "test:1", "global", "User: Zephyrine sails to Tromso.", "")
    try:
        processing = await held_processing(backend, real_server, model, doc, "Zephyrine")
        # The server refuses to delete while its pipeline works (200 `busy`): the bot asks again until it can.
        deleting = asyncio.create_task(backend.delete("global", [processing["id"]]))
        await asyncio.sleep(1.0)
        assert not deleting.done()
        model.release.set()
        await asyncio.wait_for(deleting, 10)
        assert "conv_zephyrine" not in await listed(real_server)
        assert await backend.search_entities("global", "Zephyrine", 10) == []
    finally:
        model.release.set()
        await backend.close()


async def test_a_delete_the_busy_server_refuses_past_the_timeout_is_an_error(
    real_server: RealLightRagServer, model: HeldModel, backend: LightRagServerBackend
) -> None:
    config = RagConfig(server_url=real_server.url, server_timeout_seconds=0.6, insert_timeout_seconds=0.3)
    impatient = LightRagServerBackend(lambda: config, API_KEY)
    doc = RagDocument("conv_brisingamen", "test:1", "global", "User: Brisingamen is kept in Uppsala.", "")
    try:
        held = await held_processing(impatient, real_server, model, doc, "Brisingamen")
        with pytest.raises(RagBackendError, match=f"did not delete {held['id']}: busy: Pipeline is busy"):
            await impatient.delete("global", [held["id"]])
        model.release.set()
        # Sent again once the server has processed it: the name it holds, with its id.
        assert await backend.insert("global", [doc]) == {"conv_brisingamen": held["id"]}
        await backend.delete("global", [held["id"]])
    finally:
        model.release.set()
        await impatient.close()


async def test_the_graph_is_read_and_searched_as_the_console_reads_it(backend: LightRagServerBackend) -> None:
    text = "User: Gwendolyn met Thaddeus and Ottoline in Valparaiso"  # a chain of four entities
    ids = await backend.insert("global", [RagDocument("conv_valparaiso", "test:1", "global", text, "")])
    try:
        assert await backend.search_entities("global", "thadd", 10) == ["Thaddeus"]
        assert await backend.search_entities("global", "Valparaiso", 500) == ["Valparaiso"]  # the limit kept to 100
        around = await backend.graph("global", 400, around="Gwendolyn")
        assert [entity.name for entity in around.entities][:1] == ["Gwendolyn"]
        assert {entity.name for entity in around.entities} == {"Gwendolyn", "Thaddeus", "Ottoline"}
        gwendolyn = around.entities[0]
        assert gwendolyn.documents == ("conv_valparaiso",) and gwendolyn.sources == ()
        assert any("Gwendolyn was mentioned" in description for description in gwendolyn.descriptions)
        assert {frozenset((r.source, r.target)) for r in around.relations} == {
            frozenset(("Gwendolyn", "Thaddeus")),
            frozenset(("Thaddeus", "Ottoline")),
        }
        nearest = await backend.graph("global", 2, around="Gwendolyn")
        assert [entity.name for entity in nearest.entities] == ["Gwendolyn", "Thaddeus"] and nearest.truncated
        whole = await backend.graph("global", 400)
        assert {"Gwendolyn", "Thaddeus", "Ottoline", "Valparaiso"} <= {entity.name for entity in whole.entities}
        assert (await backend.graph("global", 400, around="Nowhere-Atoll")).entities == ()
    finally:
        await backend.delete("global", list(ids.values()))
    assert await backend.search_entities("global", "Gwendolyn", 10) == []


async def test_a_wrong_api_key_is_a_clear_error(real_server: RealLightRagServer) -> None:
    backend = LightRagServerBackend(lambda: RagConfig(server_url=real_server.url), "wrong-key")
    try:
        with pytest.raises(RagBackendError, match=r"HTTP 403.*Invalid API Key"):
            await backend.query("global", naive("anything"))
    finally:
        await backend.close()


@pytest.fixture
async def server_bot(
    workspace_dir: Path, fake_openai: FakeOpenAI, real_server: RealLightRagServer
) -> AsyncIterator[Application]:
    write_runtime_config(workspace_dir, {"backend": "server", "serverUrl": real_server.url})
    bot = Application(env_for(workspace_dir, fake_openai, lightrag_api_key=API_KEY))
    await bot.start()
    yield bot
    await bot.stop()
    await rag_of(bot).close()


async def test_the_bot_indexes_recalls_and_forgets_an_exchange_on_the_server(
    server_bot: Application,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    real_server: RealLightRagServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rag = rag_of(server_bot)
    await say(server_bot, channel, "1", "Remember that the Kestrel boathouse key code is 5183.")

    async def queued() -> bool:
        return (await rag.store.counts())["queued"] == 1

    await wait_until(queued)
    assert await rag.flush() == 1
    [doc_id] = await rag.documents_for_session("test:1")
    held = (await listed(real_server))[doc_id]
    assert (await rag.store.get(doc_id)).backend_id == held["id"]  # type: ignore[union-attr]

    await say(server_bot, channel, "1", "/new")  # the live session would show the fact already
    caplog.set_level(logging.INFO, logger="bot.rag.service")
    await say(server_bot, channel, "1", "What is the code of the Kestrel boathouse?")
    # Recalled from the server, and left out of `# Relevant Memory` as the memory part says it already.
    assert "[RAG] Retrieved 1 snippets (1 already in memory)" in caplog.text
    assert "Kestrel boathouse key code is 5183" in (fake_openai.system_prompts()[-1] or "")

    listing = await say(server_bot, channel, "1", "/memory Kestrel boathouse")
    item_id = re.findall(r"^(m[0-9a-f]{11}) · semantic/fact", listing, re.M)[0]
    forgotten = await say(server_bot, channel, "1", f"/memory forget {item_id}")
    assert forgotten.startswith("Forgotten:") and "5183" in forgotten
    assert doc_id not in await listed(real_server)
    assert await rag.store.get(doc_id) is None

    await say(server_bot, channel, "1", "/new")
    await say(server_bot, channel, "1", "What is the code of the Kestrel boathouse?")
    assert "5183" not in (fake_openai.system_prompts()[-1] or "")


async def test_with_chat_scope_nothing_crosses_between_chats_though_the_server_keeps_one_graph(
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    channel: RecordingChannel,
    real_server: RealLightRagServer,
    backend: LightRagServerBackend,
) -> None:
    write_runtime_config(
        workspace_dir, {"backend": "server", "serverUrl": real_server.url}, memory={"enabled": False, "scope": "chat"}
    )
    bot = Application(env_for(workspace_dir, fake_openai, lightrag_api_key=API_KEY))
    rag = rag_of(bot)
    try:
        await bot.start()
        await say(bot, channel, "1", "My cousin Leocadia moved to Trondheim last week.")
        await say(bot, channel, "2", "My neighbour Bartholomew plays the oboe at night.")

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 2

        await wait_until(queued)
        assert await rag.flush() == 2
        # The server answers chat 2's workspace from the one graph it keeps: chat 1's exchange among it.
        answered = await backend.query("chat_test_2", naive("Where does Leocadia live?"))
        assert any("Leocadia moved to Trondheim" in snippet.text for snippet in answered)

        await say(bot, channel, "2", "/new")
        await say(bot, channel, "2", "Where does Leocadia live? Does Bartholomew know?")
        assert "Leocadia moved" not in (fake_openai.system_prompts()[-1] or "")
        assert "Bartholomew plays the oboe" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory")[1]
        await say(bot, channel, "1", "/new")  # the live session would show the fact already
        await say(bot, channel, "1", "Where does Leocadia live?")
        assert "Leocadia moved to Trondheim" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory")[1]
        # The console reads the server's one graph once, for both chats: each entity is drawn once.
        drawn = [entity for entity in (await rag.graph(400)).entities if entity.name in ("Leocadia", "Bartholomew")]
        assert [len(entity.descriptions) for entity in drawn] == [1, 1]
        assert await rag.search_entities("leoc", 10) == ["Leocadia"]
    finally:
        await bot.stop()
        await rag.close()

"""What the console's pages show, over plain HTTP: why a reply said what it said (the plan, the memory
packed, the tools with their results, the tokens and the cached share, the last `console.turnsKept` turns,
kept across a restart, an item forgotten since shown as forgotten; a trace that cannot be kept costs the
reply nothing), and the knowledge graph LightRAG really built from a conversation, searched beyond what is drawn
and drawn around an entity found, with a document forgotten from it, on every graph backend (LightRAG's files,
its PostgreSQL tables, a LightRAG server), and a graph that cannot be read or searched."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.console import graph_page
from bot.console.graph_page import SOURCE_CHARS, sources_of
from bot.rag.documents import BATCH_SEPARATOR
from bot.rag.embedded import lightrag_postgres_environment
from bot.rag.store import RagJournal
from tests.channels.telegram_harness import OWNER, RunningBot
from tests.console.helpers import (
    csrf_of,
    log_in,
    login_link,
    new_client,
    page_showing,
    root_of,
    say,
    start_console_bot,
)
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec, Usage, echo_responder
from tests.fakes.telegram_server import FakeTelegram
from tests.rag.fake_lightrag_server import FakeLightRagServer
from tests.rag.helpers import FAST_RAG, lightrag_responder
from tests.waiting import wait_until

QUESTION = "What is the bike lock code?"


def answer_with_memory_search(request: dict[str, Any]) -> Reply:
    """The question is answered after a `memory_search` call, with a cached share reported; anything else is echoed."""
    messages = request.get("messages", [])
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(text="It is 4242.", usage=Usage(prompt_tokens=12000, completion_tokens=5, cached_tokens=9000))
    if last.get("role") == "user" and last.get("content") == QUESTION and request.get("tools"):
        return Reply(
            tool_calls=[ToolCallSpec("memory_search", {"query": "bike lock"})],
            usage=Usage(prompt_tokens=10000, completion_tokens=10, cached_tokens=6000),
        )
    return echo_responder(request)


async def test_why_this_reply_shows_the_plan_the_pack_the_tools_and_the_tokens(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.set_responder(answer_with_memory_search)
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"console": {"turnsKept": 2}})
    try:
        await say(fake_telegram, OWNER, "Hello there.")
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        await say(fake_telegram, OWNER, "/new")  # out of the live conversation: memory brings it back
        assert await say(fake_telegram, OWNER, QUESTION) == "It is 4242."
        link = await login_link(fake_telegram, OWNER)
        async with new_client() as client:
            (await log_in(client, link)).release()
            text = await page_showing(client, f"{root_of(link)}/console/why", "It is 4242.")
        turns = re.findall(r'<ul class="turns">(.*?)</ul>', text, re.S)[0]
        assert QUESTION in turns and "Remember that the bike lock code" in turns
        assert "Hello there." not in turns  # only the last two turns are kept
        shown = text.split('<section class="turn"', 1)[1]
        assert QUESTION in shown and "It is 4242." in shown
        assert re.search(r"Prompt plan: [\d,]+ of [\d,]+ tokens", shown)
        assert "persona and instructions" in shown and '<svg class="bar' in shown
        assert re.search(r'<span class="packed" data-item="m[0-9a-f]+">the bike lock code is 4242\.</span>', shown)
        tools = shown.split("<h3>Tools</h3>", 1)[1].split("<h3>", 1)[0]
        assert "memory_search" in tools and "bike lock" in tools and "the bike lock code is 4242." in tools
        tokens = shown.split("<h3>Tokens</h3>", 1)[1]
        async with new_client() as client:
            (await log_in(client, await login_link(fake_telegram, OWNER))).release()
            async with client.get(f"{root_of(link)}/console/health") as page:
                health = await page.text()
        spent = health.split('<table class="spent">', 1)[1].split("</table>", 1)[0]
        # The question's two calls alone: 22,000 prompt tokens, 15,000 cached (the other replies add a few more).
        reply = re.search(r"<td>today</td><td>reply</td><td>([\d,]+)</td><td>[\d,]+</td><td>(\d+)%", spent)
        assert reply, spent
        assert int(reply.group(1).replace(",", "")) >= 22000 and int(reply.group(2)) >= 60
        assert "<td>10,000</td><td>6,000</td><td>60%</td>" in tokens
        assert "<td>12,000</td><td>9,000</td><td>75%</td>" in tokens
    finally:
        await bot.stop()


async def test_why_this_reply_outlasts_a_restart_and_a_forgotten_item_shows_as_forgotten(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.set_responder(answer_with_memory_search)
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        await say(fake_telegram, OWNER, "/new")
        assert await say(fake_telegram, OWNER, QUESTION) == "It is 4242."
    finally:
        await bot.stop()
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        link = await login_link(fake_telegram, OWNER)
        async with new_client() as client:
            (await log_in(client, link)).release()
            why = f"{root_of(link)}/console/why"
            async with client.get(why) as page:
                shown = (await page.text()).split('<section class="turn"', 1)[1]
            assert QUESTION in shown and "It is 4242." in shown  # answered by the bot before its restart
            packed = re.search(
                r'<span class="packed" data-item="(m[0-9a-f]+)">the bike lock code is 4242\.</span>', shown
            )
            assert packed, shown
            forgotten = await say(fake_telegram, OWNER, f"/memory forget {packed[1]}")
            assert forgotten == "Forgotten: the bike lock code is 4242."
            async with client.get(why) as page:
                shown = (await page.text()).split('<section class="turn"', 1)[1]
        assert f'<span class="packed" data-item="{packed[1]}"><em class="forgotten">(forgotten)</em></span>' in shown
        tools = shown.split("<h3>Tools</h3>", 1)[1].split("<h3>", 1)[0]
        assert "memory_search" in tools and "(forgotten)" in tools
        assert "the bike lock code is 4242." not in shown
    finally:
        await bot.stop()


async def test_a_turn_whose_trace_cannot_be_kept_is_answered_all_the_same(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    (workspace_dir / "state").mkdir(parents=True)
    (workspace_dir / "state" / "traces").write_text("a file where the folder of the traces should be")
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        with caplog.at_level(logging.ERROR):
            assert await say(fake_telegram, OWNER, "Hello there.") == "echo: Hello there."
            assert await say(fake_telegram, OWNER, "And again.") == "echo: And again."
            await wait_until(lambda: caplog.text.count(f"The trace of a turn of telegram:{OWNER} was not kept") == 2)
    finally:
        await bot.stop()


async def say_and_index(bot: RunningBot, fake_telegram: FakeTelegram, text: str) -> RagJournal:
    """Say `text` to the bot as its owner, then index the exchange into the knowledge graph; the graph's journal."""
    await say(fake_telegram, OWNER, text)
    store = bot.app.rag.store
    for _ in range(500):
        if (await store.counts())["queued"] == 1:
            break
        await asyncio.sleep(0.01)
    assert await bot.app.rag.flush() == 1
    return store


async def drawn_graph(client: aiohttp.ClientSession, root: str) -> dict[str, Any]:
    """The graph the page draws (graph.json), checked to show what LightRAG extracted from the Marta exchange:
    each entity's type and descriptions, the exchange it came from, the relation with what it says."""
    async with client.get(f"{root}/console/graph.json") as data:
        assert data.status == 200
        graph: dict[str, Any] = await data.json()
    nodes = {node["id"]: node for node in graph["nodes"]}
    assert {"Marta", "Lisbon"} <= set(nodes) and graph["total"] == len(nodes)
    assert nodes["Marta"]["type"] == "concept"
    assert any("Marta lives in Lisbon" in text for text in nodes["Marta"]["descriptions"])
    assert any("User: My sister Marta lives in Lisbon near the river." in text for text in nodes["Marta"]["sources"])
    [relation] = [edge for edge in graph["edges"] if {edge["source"], edge["target"]} == {"Marta", "Lisbon"}]
    assert relation["description"] == "Marta and Lisbon came up together"
    assert relation["keywords"] == "mentioned together"
    return graph


FRIENDS = "Marta met Bruno and Carla in Porto."  # Marta - Bruno - Carla - Porto, as the model extracts it


async def searched_and_drawn(client: aiohttp.ClientSession, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph of the Marta exchange and `FRIENDS` (Lisbon - Marta - Bruno - Carla - Porto), the page drawing
    its four most connected entities: the search finds Porto, which is not drawn, and choosing it draws its
    neighbourhood (the entities within two relations, with their descriptions and sources); what cannot be
    searched or drawn is answered with why."""
    monkeypatch.setattr(graph_page, "MAX_NODES", 4)  # a graph larger than what is drawn
    async with client.get(f"{root}/console/graph.json") as data:
        whole = await data.json()
    assert {node["id"] for node in whole["nodes"]} == {"Lisbon", "Marta", "Bruno", "Carla"}
    assert whole["total"] == 5 and whole["truncated"]
    async with client.get(f"{root}/console/graph/search.json", params={"q": "port"}) as found:
        assert found.status == 200
        assert await found.json() == {"query": "port", "names": ["Porto"]}
    async with client.get(f"{root}/console/graph/search.json", params={"q": "A"}) as found:
        names = (await found.json())["names"]
    assert names == ["Carla", "Marta"]  # as long as each other: by name

    async with client.get(f"{root}/console/graph.json", params={"entity": "Porto"}) as data:
        assert data.status == 200
        around = await data.json()
    nodes = {node["id"]: node for node in around["nodes"]}
    assert set(nodes) == {"Porto", "Carla", "Bruno"}  # Marta is three relations away
    assert around["entity"] == "Porto" and around["depth"] == 2 and not around["truncated"]
    assert any("Porto was mentioned" in text for text in nodes["Porto"]["descriptions"])
    assert any(f"User: {FRIENDS}" in text for text in nodes["Porto"]["sources"])
    assert {frozenset((edge["source"], edge["target"])) for edge in around["edges"]} == {
        frozenset(("Carla", "Porto")),
        frozenset(("Bruno", "Carla")),
    }

    async def refused(path: str, params: dict[str, str], status: int) -> str:
        async with client.get(f"{root}/console/{path}", params=params) as answer:
            assert answer.status == status, (path, params, await answer.text())
            error: str = (await answer.json())["error"]
        return error

    assert await refused("graph/search.json", {"q": "  "}, 400) == "Type part of an entity's name to find it."
    assert "at most 256 characters" in await refused("graph/search.json", {"q": "Porto" * 60}, 400)
    assert "holds no entity named “Oslo”" in await refused("graph.json", {"entity": "Oslo"}, 404)
    assert "its name is empty" in await refused("graph.json", {"entity": ""}, 400)
    assert "longer than 256 characters" in await refused("graph.json", {"entity": "x" * 300}, 400)
    async with client.get(f"{root}/console/graph/search.json", params={"q": "Zanzibar"}) as found:
        assert found.status == 200 and (await found.json())["names"] == []


async def test_the_graph_lightrag_built_is_drawn_searched_and_a_document_forgotten(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.set_responder(lightrag_responder)
    rag = {**FAST_RAG, "embeddingModel": "text-embedding-3-small"}
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"rag": rag, "memory": {"enabled": False}})
    try:
        store = await say_and_index(bot, fake_telegram, "My sister Marta lives in Lisbon near the river.")
        link = await login_link(fake_telegram, OWNER)
        root = root_of(link)
        async with new_client() as client:
            (await log_in(client, link)).release()
            await drawn_graph(client, root)
            [lisbon] = await store.live()
            await say_and_index(bot, fake_telegram, FRIENDS)
            await searched_and_drawn(client, root, monkeypatch)

            async with client.get(f"{root}/console/graph") as page:
                text = await page.text()
            assert "Documents indexed · 2" in text and "My sister Marta lives in Lisbon" in text
            forget = {"doc": lisbon.id, "csrf": csrf_of(text)}
            async with client.post(f"{root}/console/graph/forget", data=forget) as done:
                assert "Forgotten: 1 document(s)" in await done.text()
            async with client.get(f"{root}/console/graph.json") as data:
                assert "Lisbon" not in {node["id"] for node in (await data.json())["nodes"]}
            async with client.get(f"{root}/console/graph/search.json", params={"q": "Lisbon"}) as found:
                assert (await found.json())["names"] == []
            [kept] = await store.live()
            assert kept.id != lisbon.id and FRIENDS in kept.text
    finally:
        await bot.stop()


async def test_an_item_edited_keeps_its_earlier_version_and_a_pinned_one_goes_into_every_prompt(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        config = (await bot.app.config_store.current()).memory
        [(item, _)] = await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
        link = await login_link(fake_telegram, OWNER)
        root = root_of(link)
        async with new_client() as client:
            (await log_in(client, link)).release()
            async with client.get(f"{root}/console/memory") as page:
                csrf = csrf_of(await page.text())
            edit = {"action": "edit", "id": item.id, "content": "the bike lock code is 1234.", "csrf": csrf}
            async with client.post(f"{root}/console/memory", data=edit) as done:
                text = await done.text()
            assert "Saved: the bike lock code is 1234." in text
            card = re.search(
                r'<article class="item"[^>]*>(?:(?!</article>).)*the bike lock code is 1234\.(?:(?!</article>).)*',
                text,
                re.S,
            )
            assert card, text
            assert "1 earlier version" in card.group(0) and "<s>the bike lock code is 4242.</s>" in card.group(0)
            [(edited, _)] = await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
            async with client.post(
                f"{root}/console/memory", data={"action": "pin", "id": edited.id, "csrf": csrf}
            ) as done:
                assert "Pinned: the bike lock code is 1234." in await done.text()
            async with client.post(
                f"{root}/console/memory", data={"action": "edit", "id": edited.id, "content": " ", "csrf": csrf}
            ) as done:
                assert "An item cannot be empty: forget it instead." in await done.text()
        await say(fake_telegram, OWNER, "/new")
        await say(fake_telegram, OWNER, "Good morning")
        assert "## Pinned Memory\n- the bike lock code is 1234." in (fake_openai.system_prompts()[-1] or "")
    finally:
        await bot.stop()


async def test_a_document_the_graph_server_will_not_delete_is_said_so_and_stays_listed(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    fake_openai.set_responder(lightrag_responder)
    server = await FakeLightRagServer().start()
    rag = {**FAST_RAG, "backend": "server", "serverUrl": server.url, "serverTimeoutSeconds": 0.3}
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"rag": rag, "memory": {"enabled": False}})
    try:
        store = await say_and_index(bot, fake_telegram, "My sister Marta lives in Lisbon near the river.")
        [doc] = await store.live()
        server_id = doc.backend_id
        server.busy_deletes = 1000  # the server's pipeline stays busy: every deletion is refused
        link = await login_link(fake_telegram, OWNER)
        root = root_of(link)
        async with new_client() as client:
            (await log_in(client, link)).release()
            async with client.get(f"{root}/console/graph") as page:
                text = await page.text()
            async with client.post(f"{root}/console/graph/forget", data={"doc": doc.id, "csrf": csrf_of(text)}) as done:
                assert done.status == 200
                answer = await done.text()
            assert f"The graph could not delete {doc.id}" in answer and "still indexed: try again" in answer
            assert [(d.id, d.status) for d in await store.live()] == [(doc.id, "indexed")]
            assert server.deleted == [] and server_id in server.documents["global"]

            server.busy_deletes = 0
            async with client.post(f"{root}/console/graph/forget", data={"doc": doc.id, "csrf": csrf_of(text)}) as done:
                assert "Forgotten: 1 document(s)" in await done.text()
            assert server.deleted == [server_id] and await store.live() == []
    finally:
        await bot.stop()
        await server.stop()


def test_a_node_shows_the_exchanges_that_name_it_of_the_text_it_came_from() -> None:
    lisbon = "Conversation in chat telegram:1 on 2026-05-01 09:30 (UTC)\nUser: My sister Marta lives in Lisbon."
    orion = "Conversation in chat telegram:1 on 2026-05-01 09:31 (UTC)\nUser: Orion Labs moved offices."
    chunk = lisbon + BATCH_SEPARATOR + orion  # a chunk of a batch of exchanges
    assert sources_of("Marta", (chunk,)) == [lisbon]
    assert sources_of("marta", (lisbon, orion)) == [lisbon]  # exchanges from the journal, one a source
    assert sources_of("Labs", (chunk, orion)) == [orion]
    assert sources_of("Lisboa", (chunk,)) == [chunk]  # named otherwise by the model: the whole text
    [long] = sources_of("Marta", ("User: Marta " + "and so on " * 100,))
    assert len(long) <= SOURCE_CHARS and long.endswith("…")


async def test_the_graph_in_postgresql_is_drawn_and_searched(
    workspace_dir: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [*lightrag_postgres_environment(database_url), "POSTGRES_WORKSPACE"]:
        monkeypatch.setenv(name, "")  # put back as it was after the test (the bot sets them from the URL)
        monkeypatch.delenv(name)
    fake_openai.set_responder(lightrag_responder)
    config = {"rag": FAST_RAG, "memory": {"enabled": False}}
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, config, bot_database_url=database_url)
    try:
        await say_and_index(bot, fake_telegram, "My sister Marta lives in Lisbon near the river.")
        link = await login_link(fake_telegram, OWNER)
        async with new_client() as client:
            (await log_in(client, link)).release()
            await drawn_graph(client, root_of(link))
            await say_and_index(bot, fake_telegram, FRIENDS)
            await searched_and_drawn(client, root_of(link), monkeypatch)
        assert not list((workspace_dir / "rag").rglob("*.graphml"))  # drawn and searched from LightRAG's tables
    finally:
        await bot.stop()


async def test_the_graph_on_a_lightrag_server_is_drawn_and_searched_and_one_that_cannot_answer_is_said_so(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.set_responder(lightrag_responder)
    server = await FakeLightRagServer().start()
    rag = {**FAST_RAG, "backend": "server", "serverUrl": server.url}
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"rag": rag, "memory": {"enabled": False}})
    try:
        await say_and_index(bot, fake_telegram, "My sister Marta lives in Lisbon near the river.")
        link = await login_link(fake_telegram, OWNER)
        root = root_of(link)
        async with new_client() as client:
            (await log_in(client, link)).release()
            # The server serves no chunk's text: a node's sources are the exchanges the bot's journal holds.
            await drawn_graph(client, root)
            assert ("GET", "/graphs", "global") in server.requests
            await say_and_index(bot, fake_telegram, FRIENDS)
            await searched_and_drawn(client, root, monkeypatch)
            assert ("GET", "/graph/label/search", "global") in server.requests

            server.graph_error = "the graph storage does not answer"
            async with client.get(f"{root}/console/graph.json") as data:
                assert data.status == 503
                error = (await data.json())["error"]
            assert error.startswith("The knowledge graph could not be read: GET /graphs")
            assert "HTTP 500" in error and "the graph storage does not answer" in error
            async with client.get(f"{root}/console/graph/search.json", params={"q": "Porto"}) as found:
                assert found.status == 503
                error = (await found.json())["error"]
            assert error.startswith("The knowledge graph could not be searched: GET /graph/label/search")
            assert "HTTP 500" in error and "the graph storage does not answer" in error
            await server.stop()
            for path, params in (
                ("graph.json", {}),
                ("graph.json", {"entity": "Porto"}),
                ("graph/search.json", {"q": "P"}),
            ):
                async with client.get(f"{root}/console/{path}", params=params) as data:
                    assert data.status == 503
                    assert "The knowledge graph could not be" in (await data.json())["error"]
            async with client.get(f"{root}/console/graph") as page:  # the documents are listed all the same
                assert page.status == 200 and "Documents indexed · 2" in await page.text()
    finally:
        await bot.stop()
        await server.stop()


async def test_a_setting_saved_over_a_hand_edit_with_a_slip_writes_nothing_and_says_where_the_slip_is(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        link = await login_link(fake_telegram, OWNER)
        root = root_of(link)
        config_file = bot.workspace / "preferences" / "runtime-config.json"
        # The person's own notes and keys, with a comma too many: the bot must not write over them.
        hand_edit = '{\n  "memory": {"recentDays": 3},\n  "llm": {"temperature": 0.2},\n}\n'
        config_file.write_text(hand_edit)
        async with new_client() as client:
            (await log_in(client, link)).release()
            async with client.get(f"{root}/console/settings") as page:
                csrf = csrf_of(await page.text())
            form = {"memory.decayDays": "40", "csrf": csrf}
            async with client.post(f"{root}/console/settings", data=form) as done:
                text = await done.text()
        assert "Nothing was written" in text
        assert f"{config_file}: invalid JSON at line 4 column 1: a comma after the last entry" in text
        assert config_file.read_text() == hand_edit
    finally:
        await bot.stop()

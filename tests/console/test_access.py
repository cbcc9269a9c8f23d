"""The console's security over plain HTTP: a login link works once and only while fresh, the session
cookie is HttpOnly and SameSite=Strict, a change without the CSRF token is refused, and under
`memory.scope: user` a person's console reaches only their own memory and their own chat's turns."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from bot.app import Application
from tests.channels.telegram_harness import GROUP_MEMBER, OWNER
from tests.conftest import TEST_API_KEY
from tests.console.helpers import (
    csrf_of,
    log_in,
    login_link,
    new_client,
    page_showing,
    root_of,
    say,
    start_console_bot,
    token_of,
)
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import FakeTelegram
from tests.memory.helpers import say as say_to


async def test_a_link_works_once_and_only_while_fresh(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"console": {"linkMinutes": 0.01}})
    try:
        stale = await login_link(fake_telegram, OWNER)
        await asyncio.sleep(1.0)  # the link lasts 0.6 s
        async with new_client() as client:
            async with client.get(stale) as opened:
                assert opened.status == 403
                assert "expired or was already used" in await opened.text()
            async with client.post(f"{root_of(stale)}/console/login", data={"token": token_of(stale)}) as refused:
                assert refused.status == 403
            async with client.get(f"{root_of(stale)}/console/memory") as page:
                assert page.status == 401  # no session came of it
            async with client.get(f"{root_of(stale)}/console/graph.json") as page:
                assert page.status == 401 and "Send /console" in (await page.json())["error"]

            config_file = workspace_dir / "preferences" / "runtime-config.json"
            config = json.loads(config_file.read_text())
            config["console"]["linkMinutes"] = 5
            config_file.write_text(json.dumps(config))
            link = await login_link(fake_telegram, OWNER)
            assert "works once, within 5 minutes" in fake_telegram.sent_messages(OWNER)[-1].text
            async with await log_in(client, link) as logged_in:
                assert logged_in.status == 303
                assert logged_in.headers["Location"] == "/console/memory"
                cookie = logged_in.headers["Set-Cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
            async with client.get(f"{root_of(link)}/console/memory") as page:
                assert page.status == 200
                assert "Content-Security-Policy" in page.headers
            async with aiohttp.ClientSession() as other:  # the same link again, from another browser
                async with other.post(f"{root_of(link)}/console/login", data={"token": token_of(link)}) as reused:
                    assert reused.status == 403
    finally:
        await bot.stop()


async def test_a_change_without_the_csrf_token_is_refused(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram)
    try:
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        config = (await bot.app.config_store.current()).memory
        [(item, _)] = await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
        link = await login_link(fake_telegram, OWNER)
        async with new_client() as client:
            (await log_in(client, link)).release()
            root = root_of(link)
            for fields in ({}, {"csrf": "not-the-token"}):
                async with client.post(
                    f"{root}/console/memory", data={"action": "forget", "id": item.id, **fields}
                ) as refused:
                    assert refused.status == 403
                    assert "security token is missing or wrong" in await refused.text()
            assert await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
            async with client.get(f"{root}/console/memory") as page:
                csrf = csrf_of(await page.text())
            async with client.post(
                f"{root}/console/memory", data={"action": "forget", "id": item.id, "csrf": csrf}
            ) as done:
                assert done.status == 200
                assert "Forgotten: the bike lock code is 4242." in await done.text()
            assert await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1) == []
            # Nothing of the environment on any page: no key, no token.
            for page_name in ("memory", "long-term", "notes", "why", "graph", "graph.json", "settings", "health"):
                async with client.get(f"{root}/console/{page_name}") as page:
                    assert page.status == 200, page_name
                    body = await page.text()
                assert TEST_API_KEY not in body and fake_telegram.token not in body, page_name
                assert fake_telegram.token.split(":")[1] not in body, page_name
    finally:
        await bot.stop()


async def test_under_user_scope_a_person_sees_only_their_own_memory(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    bot = await start_console_bot(workspace_dir, fake_openai, fake_telegram, {"memory": {"scope": "user"}})
    try:
        await say(fake_telegram, OWNER, "Remember that the bike lock code is 4242.")
        await say(fake_telegram, GROUP_MEMBER, "Remember that my cat is called Miso.")
        config = (await bot.app.config_store.current()).memory
        [(owners, _)] = await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
        link = await login_link(fake_telegram, GROUP_MEMBER)
        assert "your own memory" in fake_telegram.sent_messages(GROUP_MEMBER)[-1].text
        async with new_client() as client:
            (await log_in(client, link)).release()
            root = root_of(link)
            async with client.get(f"{root}/console/memory") as page:
                text = await page.text()
            assert "my cat is called Miso" in text
            assert "bike lock" not in text and owners.id not in text
            async with client.get(f"{root}/console/memory", params={"q": "bike lock code"}) as searched:
                assert "the bike lock code is 4242" not in await searched.text()
            async with client.post(
                f"{root}/console/memory", data={"action": "forget", "id": owners.id, "csrf": csrf_of(text)}
            ) as refused:
                assert f"No memory item {owners.id} in your memory." in await refused.text()
            assert await bot.app.memory.search(config, f"telegram:{OWNER}", "bike lock code", 1)
            # "Why this reply" shows their own chat's turns alone, whichever chat the address asks for.
            why = await page_showing(client, f"{root}/console/why", "my cat is called Miso")
            assert f"telegram:{OWNER}" not in why and "bike lock" not in why
            async with client.get(f"{root}/console/why", params={"chat": f"telegram:{OWNER}"}) as page:
                other = await page.text()
            assert "No answered turn of yours is kept." in other and "bike lock" not in other
            owners_pages = ("graph", "graph.json", "graph.json?entity=Miso", "graph/search.json?q=Miso", "settings")
            for owners_page in (*owners_pages, "health"):
                async with client.get(f"{root}/console/{owners_page}") as page:
                    assert page.status == 403, owners_page
                    if ".json" in owners_page:  # the page's script shows the reason
                        assert await page.json() == {"error": "This page is the owner's."}, owners_page
        # Without `scope: user`, the console is the owner's alone.
        config_file = workspace_dir / "preferences" / "runtime-config.json"
        runtime = json.loads(config_file.read_text())
        runtime["memory"]["scope"] = "chat"
        config_file.write_text(json.dumps(runtime))
        assert await say(fake_telegram, GROUP_MEMBER, "/console") == "The web console is the owner's."
    finally:
        await bot.stop()


async def test_without_the_listener_console_says_how_to_start_it(
    services: Application, channel: RecordingChannel
) -> None:
    reply = await say_to(services, channel, "1", "/console")
    assert reply.startswith(
        "The web console is served by the bot's HTTP listener, which is not running: set BOT_LISTEN_PORT"
    )

"""The web console's logins with `BOT_DATABASE_URL`: kept in the database, so a session outlasts a restart of
the bot, and while the database does not answer the console's pages say so instead of failing bare (a
pooled connection the server ended included), and so does `/console`.

(Replicas sharing one login are in `test_replicas.py`.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import asyncpg  # type: ignore[import-untyped]

from tests.channels.telegram_harness import OWNER, RunningBot, free_port, start_bot
from tests.console.helpers import log_in, login_link, new_client, root_of
from tests.database.replicas import post, start_replica, wait_until_healthy
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database
from tests.reliability.bot_process import stop


async def test_a_session_outlasts_a_restart_and_a_database_that_does_not_answer_is_said(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    port = free_port()
    workspace = tmp_path / "workspace"

    async def started() -> RunningBot:
        return await start_bot(
            workspace, fake_openai, fake_telegram, "ptb", bot_database_url=database_url, bot_listen_port=port
        )

    bot = await started()
    async with new_client() as browser:
        try:
            link = await login_link(fake_telegram, OWNER)
            async with await log_in(browser, link) as logged_in:
                assert logged_in.status == 303
        finally:
            await bot.stop()
        memory_page = f"{root_of(link)}/console/memory"
        bot = await started()
        admin = await asyncpg.connect(database_url.rsplit("/", 1)[0] + "/postgres")
        name = database_url.rsplit("/", 1)[-1]
        try:
            async with browser.get(memory_page) as page:
                assert page.status == 200  # the same cookie, a new process
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            async with browser.get(memory_page) as page:
                assert page.status == 503
                assert "The database does not answer just now" in await page.text()
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            async with browser.get(memory_page) as page:
                assert page.status == 200
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await admin.close()
            await bot.stop()


async def test_console_says_it_cannot_make_a_link_while_the_database_does_not_answer(
    postgres_server: PostgresServer, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    # In webhook mode an update comes in whatever the database says (a poller would stop with its lease).
    url = await asyncio.to_thread(create_database, postgres_server, "console_logins_cut")
    name = url.rsplit("/", 1)[-1]
    replica = start_replica(tmp_path / "replica", url, fake_openai, fake_telegram, [OWNER])
    admin = await asyncpg.connect(url.rsplit("/", 1)[0] + "/postgres")
    try:
        await wait_until_healthy(replica)
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            await post(http, replica, fake_telegram.update(fake_telegram.push_message(OWNER, "/console")))
        [reply] = await fake_telegram.await_messages(OWNER, 1, timeout=30)
        assert reply.text == (
            "I could not make a console link: the database does not answer just now. Try /console again shortly."
        )
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()
        await asyncio.to_thread(stop, replica.process)

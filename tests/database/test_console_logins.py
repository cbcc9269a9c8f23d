"""The web console's logins with `BOT_DATABASE_URL`: kept in the database, so a session outlasts a restart of
the bot, and while the database does not answer the console's pages say so instead of failing bare (a
pooled connection the server ended included).

(Replicas sharing one login are in `test_replicas.py`.)"""

from __future__ import annotations

from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from tests.channels.telegram_harness import OWNER, RunningBot, free_port, start_bot
from tests.console.helpers import log_in, login_link, new_client, root_of
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram


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

"""A group upgraded to a supergroup with `BOT_DATABASE_URL`: the chat's rows go to the new id."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from bot.domain.model import utc_now
from bot.scheduler.reminder_store import Reminder
from tests.channels.telegram_harness import start_bot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

GROUP, SUPERGROUP = -4001, -1004001
OLD, NEW = f"telegram:{GROUP}", f"telegram:{SUPERGROUP}"


async def test_the_supergroup_goes_on_with_the_groups_rows(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, backend, bot_database_url=database_url)
    try:
        fake_telegram.push_message(GROUP, "@test_bot our picnic is on Saturday")
        await fake_telegram.await_messages(GROUP)
        due = utc_now() + timedelta(days=1)
        await bot.app.stores.reminders.put(
            Reminder(session_id=OLD, channel_type="telegram", chat_id=str(GROUP), text="bring plates", due_at=due)
        )
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        fake_telegram.push_message(SUPERGROUP, "@test_bot when is the picnic?")
        [reply] = await fake_telegram.await_messages(SUPERGROUP)
        assert reply.text == "echo: User1001: when is the picnic?"
        users = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]
        assert users == ["User1001: our picnic is on Saturday", "User1001: when is the picnic?"]
        await bot.app.chat_moves.settled()
    finally:
        await bot.stop()
    connection = await asyncpg.connect(database_url)
    try:
        sessions = [row["id"] for row in await connection.fetch("SELECT id FROM sessions")]
        archived = await connection.fetch("SELECT session_id, count(*) AS n FROM session_archive GROUP BY session_id")
        scopes = {row["scope"] for row in await connection.fetch("SELECT scope FROM memory_documents")}
        item_scopes = {row["scope"] for row in await connection.fetch("SELECT scope FROM memory_items")}
        reminders = await connection.fetch("SELECT session_id, reminder->>'chatId' AS chat_id FROM reminders")
        moves = await connection.fetch("SELECT old_chat_id, new_chat_id, done_at FROM chat_moves")
    finally:
        await connection.close()
    assert sessions == [NEW]
    assert {row["session_id"]: row["n"] for row in archived} == {NEW: 4}
    assert f"chats/{NEW}" in scopes and f"chats/{OLD}" not in scopes
    assert f"chats/{OLD}" not in item_scopes
    assert [(row["session_id"], row["chat_id"]) for row in reminders] == [(NEW, str(SUPERGROUP))]
    [move] = moves
    assert (move["old_chat_id"], move["new_chat_id"]) == (str(GROUP), str(SUPERGROUP)) and move["done_at"] is not None

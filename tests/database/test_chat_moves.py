"""A group upgraded to a supergroup with `BOT_DATABASE_URL`: the chat's rows go to the new id."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.database.connection import Database
from bot.domain.chat_move import ChatMove
from bot.domain.message import Message
from bot.domain.model import utc_now
from bot.domain.session import AgentSession
from bot.scheduler.reminder_store import Reminder
from bot.setup.export import export_workspace
from bot.setup.migrate import migrate_workspace
from bot.storage.files import read_text_sync
from bot.storage.jsonl import dumps_line
from bot.workspace import Workspace
from tests.channels.telegram_harness import WEBHOOK_SECRET, RunningBot, free_port, start_bot
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.rag.fake_lightrag_server import FakeLightRagServer
from tests.test_chat_moves import conversation_users, group_reads_marta
from tests.waiting import wait_until

GROUP, SUPERGROUP = -4001, -1004001
OLD, NEW = f"telegram:{GROUP}", f"telegram:{SUPERGROUP}"
GRAPH = f"chat_telegram_{GROUP}"  # the group's LightRAG workspace


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
        assert conversation_users(fake_openai) == [
            "User1001: our picnic is on Saturday", "User1001: when is the picnic?"
        ]  # fmt: skip
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


async def test_migrate_brings_the_moves_along_a_late_message_of_the_group_follows_and_a_half_done_move_ends(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    # On the workspace's files: the group talks, becomes the supergroup, its data moves.
    files = Workspace(tmp_path / "files")
    bot = await start_bot(files.root, fake_openai, fake_telegram, "ptb")
    try:
        fake_telegram.push_message(GROUP, "@test_bot our picnic is on Saturday")
        await fake_telegram.await_messages(GROUP)
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        await wait_until(lambda: '"done"' in (read_text_sync(files.chat_moves_file) or ""))
    finally:
        await bot.stop()
    # Another group's move that a crash cut short (its session still under the old id), and a line spoiled by hand.
    half_done = ChatMove("telegram", "-4002", "-1004002")
    stranded = AgentSession.new("telegram", "-4002")
    stranded.messages = [Message.user("User1001: the gate code is 4711", "m1")]
    (files.sessions_dir / f"{half_done.old_session_id}.json").write_text(stranded.model_dump_json(by_alias=True))
    with files.chat_moves_file.open("a") as lines:
        begun = {"channelType": "telegram", "oldChatId": "-4002", "newChatId": "-1004002", "state": "begun"}
        lines.write(dumps_line(begun) + "\n" + '{"oldChatId": "-4003"}\n')

    database = Database(database_url)
    await database.start()
    try:
        copied = (await migrate_workspace(files, database)).line()
        assert "2 chat moves, 1 chat move lines that are not moves (skipped; see the log)" in copied
        first = await moves_in(database)
        assert "2 chat moves" in (await migrate_workspace(files, database)).line()
        assert await moves_in(database) == first  # run again, nothing changes
        assert [(old, new, done is not None) for old, new, done in first] == [
            (str(GROUP), str(SUPERGROUP), True), ("-4002", "-1004002", False)
        ]  # fmt: skip
    finally:
        await database.close()

    # A bot on the database, with a workspace of its own: a message of the old group still on its way is
    # answered in the supergroup's conversation, and the move the crash cut short is finished at its start.
    bot = await start_bot(tmp_path / "on-database", fake_openai, fake_telegram, "ptb", bot_database_url=database_url)
    try:
        fake_telegram.push_message(GROUP, "@test_bot and who brings plates?")
        [reply] = await fake_telegram.await_messages(SUPERGROUP)
        assert reply.text == "echo: User1001: and who brings plates?"
        assert conversation_users(fake_openai) == [
            "User1001: our picnic is on Saturday", "User1001: and who brings plates?"
        ]  # fmt: skip
        shared = bot.app.stores.database
        assert shared is not None
        sessions = {row["id"] for row in await shared.fetch("SELECT id FROM sessions")}
        assert sessions == {NEW, half_done.new_session_id}
        exported = Workspace(tmp_path / "exported")
        assert "2 chat moves" in (await export_workspace(shared, exported)).line(exported.root)
    finally:
        await bot.stop()
    assert [json.loads(line)["state"] for line in exported.chat_moves_file.read_text().splitlines()] == [
        "begun", "begun", "done", "done"
    ]  # fmt: skip


async def moves_in(database: Database) -> list[tuple[str, str, datetime | None]]:
    rows = await database.fetch("SELECT old_chat_id, new_chat_id, done_at FROM chat_moves ORDER BY begun_at")
    return [(row["old_chat_id"], row["new_chat_id"], row["done_at"]) for row in rows]


# -- two replicas on one database, in webhook mode behind one URL -----------------------------------------


@dataclass
class Replica:
    """A bot in webhook mode on the database, behind one URL with the others (a load balancer's upstream)."""

    bot: RunningBot
    webhook: str
    fake_telegram: FakeTelegram

    @property
    def database(self) -> Database:
        assert self.bot.app.stores.database is not None
        return self.bot.app.stores.database

    async def deliver(self, update_id: int) -> None:
        """The update posted to this replica, as the load balancer sends it."""
        headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.webhook, json=self.fake_telegram.update(update_id), headers=headers) as response,
        ):
            assert response.status == 200

    async def said(self, chat: int, text: str) -> None:
        """Someone says `text` in `chat`, and the update reaches this replica."""
        await self.deliver(self.fake_telegram.push_message(chat, text))


@pytest.fixture
async def replicas(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> AsyncIterator[tuple[Replica, Replica]]:
    started: list[Replica] = []
    try:
        for name in ("a", "b"):
            port = free_port()
            webhook = f"http://127.0.0.1:{port}/telegram/webhook"
            bot = await start_bot(
                tmp_path / name, fake_openai, fake_telegram, "ptb", bot_database_url=database_url,
                telegram_mode="webhook", telegram_webhook_url=webhook, telegram_webhook_secret=WEBHOOK_SECRET,
                bot_listen_port=port,
            )  # fmt: skip
            started.append(Replica(bot, webhook, fake_telegram))
        yield started[0], started[1]
    finally:
        for replica in started:
            await replica.bot.stop()


async def sessions_in(database: Database) -> list[str]:
    return [row["id"] for row in await database.fetch("SELECT id FROM sessions")]


async def test_a_replica_that_did_not_move_the_group_answers_its_late_message_in_the_supergroup(
    replicas: tuple[Replica, Replica], fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    a, b = replicas
    # B answers the group (and holds its session); A gets both service messages and moves the group.
    await b.said(GROUP, "@test_bot our picnic is on Saturday")
    await fake_telegram.await_messages(GROUP)
    for update_id in fake_telegram.upgrade_group(GROUP, SUPERGROUP):
        await a.deliver(update_id)
    await a.bot.app.chat_moves.settled()

    # The group's last message, still on its way, reaches B: answered in the supergroup's conversation.
    await b.said(GROUP, "@test_bot who brings plates?")
    [reply] = await fake_telegram.await_messages(SUPERGROUP)
    assert reply.text == "echo: User1001: who brings plates?"
    assert conversation_users(fake_openai) == ["User1001: our picnic is on Saturday", "User1001: who brings plates?"]
    # And the supergroup's next message, through A, has the whole conversation.
    await a.said(SUPERGROUP, "@test_bot and the time?")
    await fake_telegram.await_messages(SUPERGROUP, 2)
    assert conversation_users(fake_openai) == [
        "User1001: our picnic is on Saturday", "User1001: who brings plates?", "User1001: and the time?"
    ]  # fmt: skip
    assert await sessions_in(a.database) == [NEW]
    archived = await a.database.fetch("SELECT DISTINCT session_id FROM session_archive")
    assert [row["session_id"] for row in archived] == [NEW]


async def test_a_move_waits_for_the_turn_another_replica_is_answering_in_the_group_and_takes_it_along(
    replicas: tuple[Replica, Replica], fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    a, b = replicas
    release = threading.Event()
    fake_openai.script(Reply("Saturday it is", held_until=release))
    await b.said(GROUP, "@test_bot the picnic is Saturday")
    await fake_telegram.await_until(lambda: bool(fake_openai.chat_requests()), what="B asks the model")
    for update_id in fake_telegram.upgrade_group(GROUP, SUPERGROUP):
        await a.deliver(update_id)

    async def the_move_waits() -> bool:
        return bool(await a.database.fetch("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"))

    await wait_until(the_move_waits)  # for B's turn in the group, which holds the group's lock
    release.set()
    [reply] = await fake_telegram.await_messages(SUPERGROUP)  # refused in the group, sent to the supergroup
    assert reply.text == "Saturday it is"
    await asyncio.gather(a.bot.app.chat_moves.settled(), b.bot.app.chat_moves.settled())

    await a.said(SUPERGROUP, "@test_bot and the time?")
    await fake_telegram.await_messages(SUPERGROUP, 2)
    assert conversation_users(fake_openai) == ["User1001: the picnic is Saturday", "User1001: and the time?"]
    assert await sessions_in(a.database) == [NEW]


async def test_two_replicas_each_given_one_service_message_move_the_group_once_and_both_follow_it(
    replicas: tuple[Replica, Replica],
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bot.chat_moves")
    a, b = replicas
    await a.said(GROUP, "@test_bot our picnic is on Saturday")
    await fake_telegram.await_messages(GROUP)
    moved_to, moved_from = fake_telegram.upgrade_group(GROUP, SUPERGROUP)
    await asyncio.gather(a.deliver(moved_to), b.deliver(moved_from))
    await b.said(SUPERGROUP, "@test_bot when is it?")
    await fake_telegram.await_messages(SUPERGROUP)
    await asyncio.gather(a.bot.app.chat_moves.settled(), b.bot.app.chat_moves.settled())
    await a.said(GROUP, "@test_bot who brings plates?")
    await fake_telegram.await_messages(SUPERGROUP, 2)
    assert conversation_users(fake_openai) == [
        "User1001: our picnic is on Saturday", "User1001: when is it?", "User1001: who brings plates?"
    ]  # fmt: skip
    assert await sessions_in(a.database) == [NEW]
    assert caplog.text.count("the chat's data moved") == 1


async def test_the_groups_documents_and_graph_entries_are_the_supergroups_on_a_lightrag_server(
    database_url: str, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    server = await FakeLightRagServer().start()
    rag = {"rag": {"backend": "server", "serverUrl": server.url, "batchTokens": 0, "idleFlushSeconds": 0}}
    bot = await start_bot(tmp_path / "workspace", fake_openai, fake_telegram, "ptb", rag, bot_database_url=database_url)
    try:
        upload_id = await group_reads_marta(fake_telegram)
        fake_telegram.upgrade_group(GROUP, SUPERGROUP)
        # The server keeps one graph: what the group's documents put there is recalled in the supergroup alone.
        fake_telegram.push_message(SUPERGROUP, "@test_bot Where does Marta work?")
        await fake_telegram.await_messages(SUPERGROUP)
        assert "Gulbenkian" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory", 1)[-1]
        fake_telegram.push_message(SUPERGROUP, "/docs")
        [_, listing] = await fake_telegram.await_messages(SUPERGROUP, 2)
        assert f"{upload_id} · marta.txt · 1 part · read" in listing.text
        database = bot.app.stores.database
        assert database is not None
        uploads = await database.fetch("SELECT session_id, chat_id FROM rag_uploads")
        assert [(row["session_id"], row["chat_id"]) for row in uploads] == [(NEW, str(SUPERGROUP))]
        documents = await database.fetch("SELECT session_id FROM rag_documents WHERE rag_workspace = $1", GRAPH)
        assert {row["session_id"] for row in documents} == {NEW}  # the part and the caption's exchange
    finally:
        await bot.stop()
        await server.stop()

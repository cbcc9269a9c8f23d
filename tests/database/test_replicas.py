"""Two or three `python -m bot run` processes on one database, each behind its own webhook port: replicas.

Updates are posted to the replicas' webhooks as a load balancer (or Telegram retrying) would: each
update answered once, every chat's replies in the order of its messages, a fact told through one
replica known to the other, a turn of a replica killed while the model answers finished by the other,
a reminder fired once, an update whose replica died between claiming and recording it answered when
Telegram delivers it again, the console of each showing the turns every replica answered. Polling replicas
poll one at a time: another takes over when the poller dies, and a poller whose lease connection broke stops
polling and takes the lease again.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest

from bot.app import POLLER_LEASE
from bot.database.connection import NAMED_LOCK_CLASS, presence_lock
from bot.faults import CRASH_VARIABLE, UPDATE_CLAIMED
from tests.channels.telegram_harness import OWNER
from tests.console.helpers import LINK, csrf_of, log_in, new_client, page_showing, root_of
from tests.database.replicas import Replica, post, start_replica, wait_until_healthy
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, ToolCallSpec
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database
from tests.reliability.bot_process import bad_log_lines, stop

CHATS = [5101, 5102, 5103, 5104]
MESSAGES_PER_CHAT = 6
# Reminders come due within a second of their time, so a test waits seconds, not the default five.
FAST_REMINDERS = {"scheduler": {"reminderCheckSeconds": 1}}
# Longer than any fixed guess of how long a replica may take to answer before it is taken to be gone.
SLOW_ANSWER_SECONDS = 12.0
# An answer that waited for nobody comes well within this, even on a busy machine.
NOT_WAITED_SECONDS = 5.0
STANDING_BY = "standing by to poll"
HOLDS_LEASE = "this process holds the poller lease"
LOST_LEASE = "lost the poller lease"


async def break_the_lease_connection(database_url: str) -> None:
    """End the server session that holds the poller lease, as a network failure or a restarted proxy would."""
    connection = await asyncpg.connect(database_url)
    try:
        ended = await connection.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid::bigint = $1 AND objid::bigint = (hashtext($2)::bigint & 4294967295)",
            NAMED_LOCK_CLASS,
            POLLER_LEASE,
        )
    finally:
        await connection.close()
    assert len(ended) == 1


async def claimer_gone(database_url: str, update_id: str) -> None:
    """Until the process that claimed the update holds its presence lock no more (the server ended its session)."""
    connection = await asyncpg.connect(database_url)
    try:
        async with asyncio.timeout(30):
            while await connection.fetchval(
                "SELECT count(*) FROM pg_locks, ledger_seen WHERE ledger_seen.key = $2"
                " AND pg_locks.locktype = 'advisory'"
                " AND pg_locks.granted AND pg_locks.classid::bigint = $1"
                " AND pg_locks.objid::bigint = (hashtext($3 || ledger_seen.owner)::bigint & 4294967295)",
                NAMED_LOCK_CLASS,
                update_id,
                presence_lock(""),
            ):
                await asyncio.sleep(0.05)
    finally:
        await connection.close()


_names = itertools.count(1)


@pytest.fixture
async def replicas(
    request: pytest.FixtureRequest,
    postgres_server: PostgresServer,
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    fake_telegram: FakeTelegram,
) -> AsyncIterator[list[Replica]]:
    """Two replicas in webhook mode (or as many as the test's indirect parameter says)."""
    count = getattr(request, "param", 2)
    url = await asyncio.to_thread(create_database, postgres_server, f"replicas_{next(_names)}")
    started = [
        start_replica(
            tmp_path / f"replica-{n}", url, fake_openai, fake_telegram, [*CHATS, OWNER], runtime_config=FAST_REMINDERS
        )
        for n in range(1, count + 1)
    ]
    try:
        await asyncio.gather(*(wait_until_healthy(replica) for replica in started))
        yield started
    finally:
        for replica in started:
            await asyncio.to_thread(stop, replica.process)
    for replica in started:
        assert bad_log_lines(replica.log) == []


@pytest.mark.parametrize("replicas", [2, 3], indirect=True, ids=["two", "three"])
async def test_updates_spread_over_replicas_are_answered_once_each_chat_in_order(
    replicas: list[Replica], fake_telegram: FakeTelegram
) -> None:
    texts = {chat: [f"message {n} of chat {chat}" for n in range(MESSAGES_PER_CHAT)] for chat in CHATS}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        for n in range(MESSAGES_PER_CHAT):
            for index, chat in enumerate(CHATS):
                update = fake_telegram.update(fake_telegram.push_message(chat, texts[chat][n]))
                first = replicas[(index + n) % len(replicas)]
                # Delivered to every replica at once (Telegram retrying through the load balancer): answered once.
                statuses = await asyncio.gather(*(post(http, replica, update) for replica in (first, *replicas)))
                assert statuses == [200] * (len(replicas) + 1)
    for chat in CHATS:
        await fake_telegram.await_messages(chat, MESSAGES_PER_CHAT, timeout=60)
    await asyncio.sleep(1.0)  # a duplicate reply would come now
    for chat in CHATS:
        assert [m.text for m in fake_telegram.sent_messages(chat)] == [f"echo: {text}" for text in texts[chat]]


async def test_a_fact_told_through_one_replica_is_known_through_the_other_after_new(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[0]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        told = fake_telegram.update(fake_telegram.push_message(chat, "Remember that my locker code is 7319."))
        assert await post(http, replicas[0], told) == 200
        await fake_telegram.await_messages(chat, 1, timeout=30)
        new = fake_telegram.update(fake_telegram.push_message(chat, "/new"))
        assert await post(http, replicas[1], new) == 200
        await fake_telegram.await_messages(chat, 2, timeout=30)
        asked = fake_telegram.update(fake_telegram.push_message(chat, "what is my locker code?"))
        assert await post(http, replicas[1], asked) == 200
        replies = await fake_telegram.await_messages(chat, 3, timeout=30)
    assert replies[-1].text == "echo: what is my locker code?"
    request = fake_openai.last_chat_request()
    history = [m["content"] for m in request["messages"] if m["role"] != "system"]
    assert history == ["what is my locker code?"]  # /new cleared the conversation on the other replica
    system = "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "system")
    assert "7319" in system  # the daily note the first replica wrote, in the database


async def test_a_message_waits_for_an_older_one_a_live_slow_replica_holds_however_long_that_takes(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[2]
    slow, other = replicas
    fake_openai.script(Reply("Here is the timetable, at last.", delay=SLOW_ANSWER_SECONDS))
    asked_before = len(fake_openai.chat_requests())
    texts = ["send me the timetable", "and the prices?", "thanks!"]
    updates = [fake_telegram.update(fake_telegram.push_message(chat, text)) for text in texts]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        assert await post(http, slow, updates[0]) == 200
        await fake_telegram.await_until(
            lambda: len(fake_openai.chat_requests()) > asked_before, 30, "the slow replica asking the model"
        )
        # The second waits on the slow replica behind the first; the third, on the other replica, behind both.
        assert await post(http, slow, updates[1]) == 200
        assert await post(http, other, updates[2]) == 200
    replies = await fake_telegram.await_messages(chat, 3, timeout=SLOW_ANSWER_SECONDS + 30)
    assert [m.text for m in replies] == ["Here is the timetable, at last.", "echo: and the prices?", "echo: thanks!"]


async def test_a_message_does_not_wait_for_older_ones_whose_replica_is_dead(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[3]
    dead, other = replicas
    fake_openai.script(Fault.hang(30))  # the first message's model call: held until its replica is killed
    asked_before = len(fake_openai.chat_requests())
    texts = ["what time is the meeting?", "and where?", "hello? are you there?"]
    updates = [fake_telegram.update(fake_telegram.push_message(chat, text)) for text in texts]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        assert await post(http, dead, updates[0]) == 200
        await fake_telegram.await_until(
            lambda: len(fake_openai.chat_requests()) > asked_before, 30, "the first replica asking the model"
        )
        assert await post(http, dead, updates[1]) == 200
        dead.process.kill()
        await asyncio.to_thread(dead.process.wait)
        loop = asyncio.get_running_loop()
        posted = loop.time()
        assert await post(http, other, updates[2]) == 200
        (first,) = await fake_telegram.await_messages(chat, 1, timeout=30)
        waited = loop.time() - posted
    assert first.text == "echo: hello? are you there?"
    assert waited < NOT_WAITED_SECONDS, f"answered after {waited:.1f} s"
    # The dead replica's two messages are taken over and answered too, once each.
    replies = await fake_telegram.await_messages(chat, 3, timeout=30)
    await asyncio.sleep(1.0)  # a second answer would come now
    assert sorted(m.text for m in fake_telegram.sent_messages(chat)) == sorted(m.text for m in replies)
    assert sorted(m.text for m in replies) == sorted(f"echo: {text}" for text in texts)


async def test_a_turn_of_a_replica_killed_mid_turn_is_finished_by_the_other(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[1]
    fake_openai.script(Fault.hang(20))  # the first replica's model call: held until it is killed
    asked_before = len(fake_openai.chat_requests())
    question = "which platform does the night train leave from?"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        assert await post(http, replicas[0], fake_telegram.update(fake_telegram.push_message(chat, question))) == 200
    await fake_telegram.await_until(
        lambda: len(fake_openai.chat_requests()) > asked_before, 30, "the first replica asking the model"
    )
    replicas[0].process.kill()
    await asyncio.to_thread(replicas[0].process.wait)
    assert fake_telegram.sent_messages(chat) == []
    await fake_telegram.await_messages(chat, 1, timeout=30)
    await asyncio.sleep(1.0)  # a second answer would come now
    assert [m.text for m in fake_telegram.sent_messages(chat)] == [f"echo: {question}"]


async def test_an_update_whose_replica_died_between_its_claim_and_its_record_is_answered_when_delivered_again(
    postgres_server: PostgresServer, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    url = await asyncio.to_thread(create_database, postgres_server, f"replicas_{next(_names)}")
    chat = CHATS[3]
    dying = start_replica(
        tmp_path / "dying", url, fake_openai, fake_telegram, CHATS, environment={CRASH_VARIABLE: UPDATE_CLAIMED}
    )
    other = start_replica(tmp_path / "other", url, fake_openai, fake_telegram, CHATS)
    try:
        await asyncio.gather(wait_until_healthy(dying), wait_until_healthy(other))
        update = fake_telegram.update(fake_telegram.push_message(chat, "is the pharmacy open on sunday?"))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            # The first replica claims the update and is killed before it records the message: no answer.
            with pytest.raises(aiohttp.ClientError):
                await post(http, dying, update)
            assert await asyncio.to_thread(dying.process.wait) == -signal.SIGKILL
            # Telegram got no 200, so it delivers the update again, seconds later (once the server has seen
            # the dead replica's connections close), here through the other replica.
            await claimer_gone(url, str(update["update_id"]))
            assert await post(http, other, update) == 200
            try:
                await fake_telegram.await_messages(chat, 1, timeout=30)
            except TimeoutError as error:
                raise AssertionError(other.log.read_text(errors="replace")) from error
            assert await post(http, other, update) == 200  # once answered, a further copy is a duplicate
        await asyncio.sleep(1.0)  # a second answer would come now
        assert [m.text for m in fake_telegram.sent_messages(chat)] == ["echo: is the pharmacy open on sunday?"]
    finally:
        for replica in (dying, other):
            await asyncio.to_thread(stop, replica.process)
    assert bad_log_lines(other.log) == []


async def test_a_reminder_set_through_one_replica_fires_once(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("schedule_reminder", {"text": "stretch your legs", "delay": "3s"}, id="c1")]),
        "I'll remind you in three seconds.",
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        asked = fake_telegram.update(fake_telegram.push_message(OWNER, "remind me to stretch my legs in 3 seconds"))
        assert await post(http, replicas[0], asked) == 200
    replies = await fake_telegram.await_messages(OWNER, 2, timeout=30)
    assert [m.text for m in replies] == ["I'll remind you in three seconds.", "⏰ Reminder: stretch your legs"]
    await asyncio.sleep(3.0)  # both replicas check their reminders every second: a second firing would come now
    assert len(fake_telegram.sent_messages(OWNER)) == 2


async def console_of(replica: Replica, fake_telegram: FakeTelegram, client: aiohttp.ClientSession) -> str:
    """Log `client` in to the web console of `replica` with the link its `/console` sends the owner (the first
    allowed user); the console's root."""
    owner = CHATS[0]
    before = len(fake_telegram.sent_messages(owner))
    assert await post(client, replica, fake_telegram.update(fake_telegram.push_message(owner, "/console"))) == 200
    replies = await fake_telegram.await_messages(owner, before + 1, timeout=30)
    found = LINK.search(replies[before].text)
    assert found, replies[before].text
    link = found.group(1)
    assert root_of(link) == f"http://127.0.0.1:{replica.port}"
    async with await log_in(client, link) as response:
        assert response.status == 303
    return f"{root_of(link)}/console"


async def test_a_setting_saved_through_the_console_of_one_replica_reaches_the_other(
    replicas: list[Replica], fake_telegram: FakeTelegram
) -> None:
    first, second = replicas
    async with new_client() as on_first, new_client() as on_second:
        first_console = await console_of(first, fake_telegram, on_first)
        second_console = await console_of(second, fake_telegram, on_second)
        async with on_second.get(f"{second_console}/settings") as page:
            assert 'id="memory.recentDays" value="7"' in await page.text()
        async with on_first.get(f"{first_console}/settings") as page:
            csrf = csrf_of(await page.text())
        form = {"csrf": csrf, "memory.recentDays": "3"}
        async with on_first.post(f"{first_console}/settings", data=form) as saved:
            assert saved.status == 200
            assert "Saved: memory.recentDays = 3" in await saved.text()
        # The other replica reads the database's row again within a second of the change.
        shown = await page_showing(on_second, f"{second_console}/settings", 'id="memory.recentDays" value="3"', 10)
        assert 'id="memory.recentDays" value="7"' not in shown


async def test_the_turns_every_replica_answered_are_shown_by_the_console_of_each(
    replicas: list[Replica], fake_telegram: FakeTelegram
) -> None:
    chat = CHATS[1]
    questions = ["Which replica answers this one?", "And which answers this one?"]
    async with new_client() as on_first, new_client() as on_second:
        consoles = [
            await console_of(replicas[0], fake_telegram, on_first),
            await console_of(replicas[1], fake_telegram, on_second),
        ]
        for number, (replica, question) in enumerate(zip(replicas, questions, strict=True), start=1):
            assert (
                await post(on_first, replica, fake_telegram.update(fake_telegram.push_message(chat, question))) == 200
            )
            await fake_telegram.await_messages(chat, number, timeout=30)
        for browser, console in zip((on_first, on_second), consoles, strict=True):
            why = await page_showing(browser, f"{console}/why?chat=telegram:{chat}", questions[1])
            turns = re.findall(r'<ul class="turns">(.*?)</ul>', why, re.S)[0]
            assert questions[0] in turns and questions[1] in turns, console
            # The health page says whose figures are whose: its totals this replica's, its turns every replica's.
            health = await page_showing(browser, f"{console}/health", "Since this replica (")
            assert "Recent turns (every replica’s)" in health and "Queues (this replica’s)" in health, console
            assert health.count(f"telegram:{chat}") >= 2, console  # both turns, whichever replica answered


async def test_a_console_link_sent_through_one_replica_logs_in_on_another_and_the_session_works_on_both(
    replicas: list[Replica], fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    first, second = replicas
    owner = CHATS[0]
    assert await post_to(first, fake_telegram, owner, "/console") == 200
    [reply] = await fake_telegram.await_messages(owner, 1, timeout=30)
    found = LINK.search(reply.text)
    assert found, reply.text
    token = found.group(1).rsplit("=", 1)[1]
    # Behind one address, a load balancer may send the browser to the replica that did not send the link.
    on_second = f"http://127.0.0.1:{second.port}/console"
    on_first = f"http://127.0.0.1:{first.port}/console"
    async with new_client() as browser:
        async with await log_in(browser, f"{on_second}/login?token={token}") as logged_in:
            assert logged_in.status == 303
        for console in (on_first, on_second):
            async with browser.get(f"{console}/memory") as page:
                assert page.status == 200, console
        async with aiohttp.ClientSession() as other:  # the used link, on the replica that sent it
            async with other.post(f"{on_first}/login", data={"token": token}) as reused:
                assert reused.status == 403
        cookie = next(c.value for c in browser.cookie_jar if c.key == "console_session")
        connection = await asyncpg.connect(first.database_url)
        try:
            stored = [row["key"] for row in await connection.fetch("SELECT key FROM console_sessions")]
        finally:
            await connection.close()
        assert stored and cookie not in stored  # kept as digests: a row logs nobody in
        async with browser.get(f"{on_first}/memory") as page:
            csrf = csrf_of(await page.text())
        async with browser.post(f"{on_first}/logout", data={"csrf": csrf}) as logged_out:
            assert logged_out.status == 200
        async with aiohttp.ClientSession(cookies={"console_session": cookie}) as stale:
            async with stale.get(f"{on_second}/memory") as page:
                assert page.status == 401  # ended through the first, ended on the second


async def post_to(replica: Replica, fake_telegram: FakeTelegram, chat: int, text: str) -> int:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        return await post(http, replica, fake_telegram.update(fake_telegram.push_message(chat, text)))


async def test_polling_replicas_poll_one_at_a_time_and_another_takes_over_when_the_poller_dies(
    postgres_server: PostgresServer, tmp_path: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram
) -> None:
    url = await asyncio.to_thread(create_database, postgres_server, f"replicas_{next(_names)}")
    chat = CHATS[2]
    started = [
        start_replica(tmp_path / f"poller-{n}", url, fake_openai, fake_telegram, CHATS, polling=True) for n in (1, 2)
    ]
    try:
        await asyncio.gather(*(wait_until_healthy(replica) for replica in started))
        fake_telegram.push_message(chat, "first question")
        await fake_telegram.await_messages(chat, 1, timeout=30)
        await asyncio.sleep(2.0)  # a standby that polled too would have made or met a 409 by now
        assert [call.status for call in fake_telegram.calls_to("getUpdates") if call.status == 409] == []
        pollers = [replica for replica in started if HOLDS_LEASE in replica.log.read_text(errors="replace")]
        assert len(pollers) == 1
        (poller,) = pollers
        (standby,) = [replica for replica in started if replica is not poller]
        # The standby says it stands by, never that it polls.
        standby_log = standby.log.read_text(errors="replace")
        assert STANDING_BY in standby_log and " polling (" not in standby_log

        poller.process.kill()
        await asyncio.to_thread(poller.process.wait)
        fake_telegram.push_message(chat, "second question")
        replies = await fake_telegram.await_messages(chat, 2, timeout=20)
        assert HOLDS_LEASE in standby.log.read_text(errors="replace")
        await asyncio.sleep(1.0)  # a second answer would come now
        assert [m.text for m in fake_telegram.sent_messages(chat)] == ["echo: first question", "echo: second question"]
        assert [m.text for m in replies] == ["echo: first question", "echo: second question"]

        # The lease's connection breaks under a live poller: it stops polling and takes the lease again.
        await break_the_lease_connection(url)
        await fake_telegram.await_until(
            lambda: LOST_LEASE in standby.log.read_text(errors="replace"), 15, "the lost lease"
        )
        fake_telegram.push_message(chat, "third question")
        await fake_telegram.await_messages(chat, 3, timeout=20)
        await asyncio.sleep(1.0)
        assert [m.text for m in fake_telegram.sent_messages(chat)][2:] == ["echo: third question"]
    finally:
        for replica in started:
            await asyncio.to_thread(stop, replica.process)
    for replica in started:
        assert bad_log_lines(replica.log) == []


def memory_items_section(system: str) -> str:
    """The memory pack's sections of items (facts, procedures, earlier exchanges), without the daily notes."""
    headings = ("## Facts and Preferences", "## Procedures and Fixes", "## Related Earlier Exchanges")
    parts = re.split(r"(?m)^(?=#{1,2} )", system)
    return "".join(part for part in parts if part.startswith(headings))


async def test_an_item_told_through_one_replica_is_in_the_memory_pack_of_the_other_and_forgotten_through_it(
    replicas: list[Replica], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    chat = CHATS[2]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:

        async def say(replica: Replica, text: str, count: int) -> str:
            assert await post(http, replica, fake_telegram.update(fake_telegram.push_message(chat, text))) == 200
            return str((await fake_telegram.await_messages(chat, count, timeout=30))[-1].text)

        await say(replicas[0], "My bicycle is a green Gazelle with a basket.", 1)
        await say(replicas[1], "/new", 2)
        await say(replicas[1], "what colour is my bicycle?", 3)
        system = "\n".join(
            str(m["content"]) for m in fake_openai.last_chat_request()["messages"] if m["role"] == "system"
        )
        assert "green Gazelle" in memory_items_section(system), system

        # /memory lists and forgets the items of the database, whichever replica it reaches.
        listed = await say(replicas[1], "/memory Gazelle", 4)
        fact = re.search(r"^(m\w+) · semantic/fact", listed, re.MULTILINE)
        assert fact is not None, listed
        assert fact[1] in await say(replicas[0], "/memory Gazelle", 5)
        forgotten = await say(replicas[1], f"/memory forget {fact[1]}", 6)
        assert forgotten == "Forgotten: My bicycle is a green Gazelle with a basket."
        # Gone for the first replica too, with the recorded exchange that held it.
        assert await say(replicas[0], "/memory Gazelle", 7) == "Nothing in memory matches “Gazelle”."

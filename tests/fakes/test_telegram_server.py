"""Tests of the fake Telegram Bot API server, driven by the real PTB and aiogram clients."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import telegram
from aiohttp import web
from telegram.error import BadRequest, Conflict, NetworkError, RetryAfter, TimedOut
from telegram.ext import Application, ApplicationBuilder, CommandHandler, ContextTypes, MessageHandler, filters

from tests.fakes.telegram_server import (
    BotApiError,
    FakeTelegram,
    Fault,
    UploadedFile,
    format_text,
    parse_html,
    utf16_len,
)

if TYPE_CHECKING:
    import aiogram

CHAT = 4242
GROUP = -1001234


# ------------------------------------------------------------------------------ helpers


@pytest.fixture
async def ptb_bot(fake_telegram: FakeTelegram) -> AsyncIterator[telegram.Bot]:
    bot = telegram.Bot(
        fake_telegram.token,
        base_url=f"{fake_telegram.root}/bot",
        base_file_url=f"{fake_telegram.root}/file/bot",
    )
    async with bot:
        yield bot


@pytest.fixture
async def aiogram_bot(fake_telegram: FakeTelegram) -> AsyncIterator[aiogram.Bot]:
    # aiogram is imported by the tests that use it only: see AIOGRAM_GROUP in tests/conftest.py.
    import aiogram
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer

    session = AiohttpSession(api=TelegramAPIServer.from_base(fake_telegram.root))
    bot = aiogram.Bot(fake_telegram.token, session=session)
    yield bot
    await bot.session.close()


def ptb_application(fake: FakeTelegram) -> Application[Any, Any, Any, Any, Any, Any]:
    return (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(f"{fake.root}/bot")
        .base_file_url(f"{fake.root}/file/bot")
        .build()
    )


def seconds(value: int | dtm.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


# ------------------------------------------------------------------------------ python-telegram-bot


async def test_ptb_bot_sends_validates_and_edits(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    me = await ptb_bot.get_me()
    assert (me.username, me.is_bot) == ("test_bot", True)

    plain = await ptb_bot.send_message(CHAT, "hello")
    html = await ptb_bot.send_message(CHAT, "<b>bold</b> &amp; <i>it</i>", parse_mode="HTML")
    assert (plain.message_id, html.message_id) == (1, 2)
    assert html.text == "bold & it"
    assert [(e.type, e.offset, e.length) for e in html.entities] == [("bold", 0, 4), ("italic", 7, 2)]

    with pytest.raises(BadRequest, match="parse entities"):
        await ptb_bot.send_message(CHAT, "<b>unclosed", parse_mode="HTML")
    with pytest.raises(BadRequest, match="too long"):
        await ptb_bot.send_message(CHAT, "x" * 4097)
    with pytest.raises(BadRequest, match="text is empty"):
        await ptb_bot.send_message(CHAT, "  \n ")

    edited = await ptb_bot.edit_message_text("hello, world", chat_id=CHAT, message_id=plain.message_id)
    assert isinstance(edited, telegram.Message) and edited.edit_date is not None
    with pytest.raises(BadRequest, match="not modified"):
        await ptb_bot.edit_message_text("hello, world", chat_id=CHAT, message_id=plain.message_id)
    with pytest.raises(BadRequest, match="to edit not found"):
        await ptb_bot.edit_message_text("nope", chat_id=CHAT, message_id=999)

    assert await ptb_bot.send_chat_action(CHAT, "typing") is True
    assert await ptb_bot.delete_message(CHAT, html.message_id) is True

    assert [m.text for m in fake_telegram.sent_messages(CHAT)] == ["hello", "<b>bold</b> &amp; <i>it</i>"]
    assert [(e.message_id, e.text) for e in fake_telegram.edits(CHAT)] == [(1, "hello, world")]
    assert fake_telegram.chat_actions(CHAT) == ["typing"]
    assert fake_telegram.visible_text(CHAT) == ["hello, world"]
    failed = [c for c in fake_telegram.calls_to("sendMessage") if not c.ok]
    assert [c.status for c in failed] == [400, 400, 400]


async def test_forum_topics_as_telegram_has_them(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    topic = fake_telegram.open_topic(GROUP, "Trips")
    fake_telegram.push_message(GROUP, "in the topic", thread_id=topic)
    fake_telegram.push_message(GROUP, "in General")
    in_topic, in_general = [u.message for u in await ptb_bot.get_updates(timeout=0)]
    assert in_topic is not None and in_general is not None and in_topic.chat.is_forum
    assert (in_topic.is_topic_message, in_topic.message_thread_id) == (True, topic)
    assert in_topic.reply_to_message is not None and in_topic.reply_to_message.forum_topic_created is not None
    assert (in_general.is_topic_message, in_general.message_thread_id, in_general.reply_to_message) == (None,) * 3
    sent = await ptb_bot.send_message(GROUP, "answer", message_thread_id=topic)
    assert (sent.is_topic_message, sent.message_thread_id) == (True, topic)
    assert await ptb_bot.send_chat_action(GROUP, "typing", message_thread_id=topic) is True
    await ptb_bot.send_message(GROUP, "to General")
    with pytest.raises(BadRequest, match="thread not found"):
        await ptb_bot.send_message(GROUP, "nowhere", message_thread_id=topic + 100)
    assert fake_telegram.thread_ids("sendMessage", GROUP) == [topic, None]
    assert [m.thread_id for m in fake_telegram.sent_messages(GROUP)] == [topic, None]
    assert fake_telegram.thread_ids("sendChatAction", GROUP) == [topic]


async def test_a_topic_closed_or_deleted_refuses_what_the_bot_sends_there_as_telegram_does(
    fake_telegram: FakeTelegram, ptb_bot: telegram.Bot
) -> None:
    closed, deleted, gone = (fake_telegram.open_topic(GROUP, name) for name in ("Closed", "Deleted", "Gone"))
    shown = await ptb_bot.send_message(GROUP, "before", message_thread_id=closed)
    kept = await ptb_bot.send_message(GROUP, "before", message_thread_id=deleted)
    fake_telegram.close_topic(GROUP, closed)
    fake_telegram.delete_topic(GROUP, deleted)
    fake_telegram.delete_topic(GROUP, gone, answer="TOPIC_DELETED")
    with pytest.raises(BadRequest, match="Topic_closed"):  # PTB capitalises the description
        await ptb_bot.send_message(GROUP, "after", message_thread_id=closed)
    with pytest.raises(BadRequest, match="Topic_closed"):
        await ptb_bot.send_document(GROUP, b"abc", filename="a.txt", message_thread_id=closed)
    # What was sent to a closed topic stays there, editable; a deleted topic's messages are gone with it.
    await ptb_bot.edit_message_text("edited", chat_id=GROUP, message_id=shown.message_id)
    with pytest.raises(BadRequest, match="to edit not found"):
        await ptb_bot.edit_message_text("edited", chat_id=GROUP, message_id=kept.message_id)
    with pytest.raises(BadRequest, match="thread not found"):
        await ptb_bot.send_message(GROUP, "after", message_thread_id=deleted)
    with pytest.raises(BadRequest, match="Topic_deleted"):
        await ptb_bot.send_message(GROUP, "after", message_thread_id=gone)
    await ptb_bot.send_message(GROUP, "to General")
    assert fake_telegram.thread_ids("sendMessage", GROUP) == [closed, deleted, None]


async def test_ptb_application_polls_and_replies(fake_telegram: FakeTelegram) -> None:
    async def start(update: telegram.Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text("welcome")

    async def echo(update: telegram.Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(f"echo: {update.effective_message.text}")

    app = ptb_application(fake_telegram)
    app.add_handler(CommandHandler("start", start))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=1)
        fake_telegram.push_message(CHAT, "/start")
        fake_telegram.push_message(CHAT, "hi there")
        replies = await fake_telegram.await_messages(CHAT, 2, timeout=5)
        await app.updater.stop()
        await app.stop()
    assert sorted(m.text for m in replies) == ["echo: hi there", "welcome"]
    assert "deleteWebhook" in [c.method for c in fake_telegram.calls]  # PTB clears webhooks first
    assert fake_telegram.pending_update_count() == 0  # PTB acknowledged both on shutdown


async def test_ptb_polling_recovers_after_outage(fake_telegram: FakeTelegram) -> None:
    async def echo(update: telegram.Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text("back")

    app = ptb_application(fake_telegram)
    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=1)
        await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("getUpdates")), 5)
        fake_telegram.go_down()
        await fake_telegram.await_until(
            lambda: any(c.error == "connection dropped" for c in fake_telegram.calls_to("getUpdates")), 5
        )
        fake_telegram.push_message(CHAT, "are you there?")
        fake_telegram.come_up()
        replies = await fake_telegram.await_messages(CHAT, 1, timeout=8)
        await app.updater.stop()
        await app.stop()
    assert replies[0].text == "back"


async def test_ptb_timeout_that_was_applied_shows_the_duplicate_risk(
    fake_telegram: FakeTelegram, ptb_bot: telegram.Bot
) -> None:
    fake_telegram.fail_next("sendMessage", Fault.timeout(1.0, apply=True))
    with pytest.raises(TimedOut):
        await ptb_bot.send_message(CHAT, "once", read_timeout=0.3)
    assert [m.text for m in fake_telegram.sent_messages(CHAT)] == ["once"]  # it was delivered anyway

    fake_telegram.fail_next("sendMessage", "timeout", seconds=1.0)  # apply=False: lost on the way
    with pytest.raises(TimedOut):
        await ptb_bot.send_message(CHAT, "lost", read_timeout=0.3)
    assert [m.text for m in fake_telegram.sent_messages(CHAT)] == ["once"]


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")  # PTB's own RetryAfter
async def test_ptb_errors_429_5xx_and_dropped_connection(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    fake_telegram.fail_next("sendMessage", Fault.rate_limit(retry_after=7))
    with pytest.raises(RetryAfter) as raised:
        await ptb_bot.send_message(CHAT, "x")
    assert seconds(raised.value.retry_after) == 7

    fake_telegram.fail_next("sendMessage", "server_error", status=502)
    with pytest.raises(NetworkError, match="Bad Gateway"):
        await ptb_bot.send_message(CHAT, "x")
    fake_telegram.fail_next("sendmessage", Fault.drop_connection())
    with pytest.raises(NetworkError):
        await ptb_bot.send_message(CHAT, "x")
    fake_telegram.fail_next("sendMessage", Fault.cant_parse_entities())
    with pytest.raises(BadRequest, match="parse entities"):
        await ptb_bot.send_message(CHAT, "fine")

    assert (await ptb_bot.send_message(CHAT, "finally")).text == "finally"
    assert [c.fault for c in fake_telegram.calls_to("sendMessage")] == [
        "rate_limit", "server_error", "drop_connection", "cant_parse_entities", None,
    ]  # fmt: skip


async def test_offsets_acknowledge_and_redeliver_repeats(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    first = fake_telegram.push_message(CHAT, "one")
    second = fake_telegram.push_message(CHAT, "two")
    assert [u.update_id for u in await ptb_bot.get_updates(timeout=0)] == [first, second]
    assert [u.update_id for u in await ptb_bot.get_updates(timeout=0)] == [first, second]  # not acked

    assert await ptb_bot.get_updates(offset=second + 1, timeout=0) == ()
    assert await ptb_bot.get_updates(timeout=0) == ()  # acknowledged updates are gone for good

    fake_telegram.redeliver(first)
    redelivered = await ptb_bot.get_updates(offset=second + 1, timeout=0)
    assert [(u.update_id, u.message.text) for u in redelivered if u.message] == [(first, "one")]
    assert await ptb_bot.get_updates(offset=second + 1, timeout=0) == ()

    started = time.monotonic()
    assert await ptb_bot.get_updates(offset=second + 1, timeout=1) == ()
    assert time.monotonic() - started >= 0.9  # a real long poll

    async def push_later() -> int:
        await asyncio.sleep(0.2)
        return fake_telegram.push_message(CHAT, "three")

    pusher = asyncio.create_task(push_later())
    started = time.monotonic()
    updates = await ptb_bot.get_updates(offset=second + 1, timeout=5)
    assert [u.update_id for u in updates] == [await pusher]
    assert time.monotonic() - started < 2  # answered as soon as the update arrived


async def test_a_second_poller_terminates_the_first(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    # A PTB Bot keeps a one-connection pool for getUpdates, so the rival poller is a second Bot.
    first = asyncio.create_task(ptb_bot.get_updates(timeout=3))
    await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("getUpdates")), 2)
    async with telegram.Bot(fake_telegram.token, base_url=f"{fake_telegram.root}/bot") as rival:
        assert await rival.get_updates(timeout=0) == ()
    with pytest.raises(Conflict, match="terminated by other getUpdates"):
        await first


async def test_webhook_blocks_polling_and_posts_with_secret(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    received: list[dict[str, Any]] = []

    async def receive(request: web.Request) -> web.Response:
        if request.headers.get("X-Telegram-Bot-Api-Secret-Token") != "s3cret":
            return web.Response(status=403)
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        assert await ptb_bot.set_webhook(url, secret_token="s3cret") is True
        info = await ptb_bot.get_webhook_info()
        assert info.url == url and fake_telegram.webhook_secret == "s3cret"
        with pytest.raises(Conflict, match="webhook is active"):
            await ptb_bot.get_updates(timeout=0)

        update_id = fake_telegram.push_message(CHAT, "via webhook")
        assert await fake_telegram.post_webhook_update(update_id) == 200
        assert await fake_telegram.post_webhook_update(update_id, secret="wrong") == 403
        assert await fake_telegram.post_webhook_update(update_id, secret=None) == 403
        assert [(u["update_id"], u["message"]["text"]) for u in received] == [(update_id, "via webhook")]

        assert await ptb_bot.delete_webhook() is True
        assert [u.update_id for u in await ptb_bot.get_updates(timeout=0)] == [update_id]
    finally:
        await runner.cleanup()


async def test_ptb_inline_buttons_files_drafts_and_commands(fake_telegram: FakeTelegram, ptb_bot: telegram.Bot) -> None:
    keyboard = telegram.InlineKeyboardMarkup([[telegram.InlineKeyboardButton("Yes", callback_data="yes")]])
    sent = await ptb_bot.send_message(CHAT, "Sure?", reply_markup=keyboard)
    assert sent.reply_markup == keyboard
    fake_telegram.push_callback_query(CHAT, "yes")
    photo_update = fake_telegram.push_photo(CHAT, content=b"\x89PNG-bytes", caption="look")
    updates = await ptb_bot.get_updates(timeout=0)
    query = updates[0].callback_query
    assert query is not None and query.data == "yes" and query.message is not None
    assert query.message.message_id == sent.message_id
    assert await ptb_bot.answer_callback_query(query.id, text="ok") is True
    with pytest.raises(BadRequest, match=r"(?i)query id is invalid"):
        await ptb_bot.answer_callback_query("nonsense")

    message = updates[1].message
    assert updates[1].update_id == photo_update and message is not None and message.caption == "look"
    photo_file = await ptb_bot.get_file(message.photo[-1].file_id)
    assert bytes(await photo_file.download_as_bytearray()) == b"\x89PNG-bytes"

    assert await ptb_bot.send_message_draft(CHAT, draft_id=7, text="Thinking…") is True
    with pytest.raises(BadRequest, match="private"):
        await ptb_bot.send_message_draft(GROUP, draft_id=7, text="no")
    assert [(d.draft_id, d.text) for d in fake_telegram.drafts(CHAT)] == [(7, "Thinking…")]

    await ptb_bot.set_my_commands([("start", "Start the bot"), ("help", "Show help")])
    assert [c.command for c in await ptb_bot.get_my_commands()] == ["start", "help"]
    assert fake_telegram.commands()[0] == {"command": "start", "description": "Start the bot"}
    with pytest.raises(BadRequest, match=r"(?i)bot_command_invalid"):
        await ptb_bot.set_my_commands([("Bad-Command", "x")])


# ------------------------------------------------------------------------------ aiogram


async def test_aiogram_bot_sends_validates_and_edits(fake_telegram: FakeTelegram, aiogram_bot: aiogram.Bot) -> None:
    import aiogram
    from aiogram.exceptions import (
        TelegramBadRequest,
        TelegramConflictError,
        TelegramNetworkError,
        TelegramRetryAfter,
        TelegramServerError,
    )

    me = await aiogram_bot.get_me()
    assert me.username == "test_bot"
    plain = await aiogram_bot.send_message(CHAT, "plain")
    html = await aiogram_bot.send_message(CHAT, "<code>x &lt; y</code>", parse_mode="HTML")
    assert html.text == "x < y" and html.entities is not None and html.entities[0].type == "code"

    with pytest.raises(TelegramBadRequest, match="can't parse entities"):
        await aiogram_bot.send_message(CHAT, "<b><i>mis</b></i>", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await aiogram_bot.send_message(CHAT, "😀" * 2049)  # 4098 UTF-16 code units
    assert (await aiogram_bot.send_message(CHAT, "😀" * 2048)).text == "😀" * 2048

    edited = await aiogram_bot.edit_message_text(text="plain!", chat_id=CHAT, message_id=plain.message_id)
    assert isinstance(edited, aiogram.types.Message) and edited.text == "plain!"
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await aiogram_bot.edit_message_text(text="plain!", chat_id=CHAT, message_id=plain.message_id)
    assert await aiogram_bot.send_chat_action(CHAT, "typing") is True

    fake_telegram.fail_next("sendMessage", Fault.rate_limit(retry_after=5))
    with pytest.raises(TelegramRetryAfter) as raised:
        await aiogram_bot.send_message(CHAT, "x")
    assert raised.value.retry_after == 5
    fake_telegram.fail_next("sendMessage", Fault.server_error(502))
    with pytest.raises(TelegramServerError):
        await aiogram_bot.send_message(CHAT, "x")
    fake_telegram.fail_next("sendMessage", Fault.drop_connection())
    with pytest.raises(TelegramNetworkError):
        await aiogram_bot.send_message(CHAT, "x")

    await aiogram_bot.set_webhook("http://127.0.0.1:9/hook")
    with pytest.raises(TelegramConflictError):
        await aiogram_bot.get_updates(timeout=0)
    await aiogram_bot.delete_webhook()
    assert fake_telegram.visible_text(CHAT) == ["plain!", "x < y", "😀" * 2048]


async def test_aiogram_dispatcher_polls_and_replies(fake_telegram: FakeTelegram, aiogram_bot: aiogram.Bot) -> None:
    import aiogram

    dispatcher = aiogram.Dispatcher()

    @dispatcher.message(aiogram.filters.Command("start"))
    async def start(message: aiogram.types.Message) -> None:
        await message.answer("welcome")

    @dispatcher.message()
    async def echo(message: aiogram.types.Message) -> None:
        await message.answer(f"echo: {message.text}")

    polling = asyncio.create_task(dispatcher.start_polling(aiogram_bot, polling_timeout=1, handle_signals=False))
    try:
        fake_telegram.push_message(GROUP, "/start@test_bot", user_id=77, username="alice")
        fake_telegram.push_message(GROUP, "hello @test_bot", user_id=77)
        replies = await fake_telegram.await_messages(GROUP, 2, timeout=5)
    finally:
        await dispatcher.stop_polling()
        await asyncio.wait_for(polling, 5)
    assert sorted(m.text for m in replies) == ["echo: hello @test_bot", "welcome"]
    polls = fake_telegram.calls_to("getUpdates")
    assert polls[0].params["allowed_updates"] == ["message"]  # aiogram asks only for what it handles


# ------------------------------------------------------------------------------ raw HTTP and sync use


async def test_raw_http_answers_like_telegram(fake_telegram: FakeTelegram) -> None:
    def handle_document(params: dict[str, Any]) -> dict[str, Any]:
        document = params["document"]
        assert isinstance(document, UploadedFile)
        if not document.data:
            raise BotApiError(400, "Bad Request: file must be non-empty")
        return {"size": len(document.data), "caption": params.get("caption")}

    fake_telegram.register_method("sendDocument", handle_document)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake_telegram.api_url}/noSuchMethod") as response:
            assert response.status == 404
            assert await response.json() == {"ok": False, "error_code": 404, "description": "Not Found"}
        async with http.post(f"{fake_telegram.root}/bot1:WRONG/getMe") as response:
            assert response.status == 401
        body = {"chat_id": CHAT, "text": "json", "reply_markup": {"inline_keyboard": []}}
        async with http.post(f"{fake_telegram.api_url}/sendMessage", json=body) as response:
            assert (await response.json())["result"]["text"] == "json"
        form = aiohttp.FormData()
        form.add_field("chat_id", str(CHAT))
        form.add_field("caption", "doc")
        form.add_field("document", b"abc", filename="a.txt", content_type="text/plain")
        async with http.post(f"{fake_telegram.api_url}/sendDocument", data=form) as response:
            assert (await response.json())["result"] == {"size": 3, "caption": "doc"}
    call = fake_telegram.calls_to("sendDocument")[0]
    assert call.params["chat_id"] == CHAT and call.params["document"].filename == "a.txt"


async def test_a_group_upgraded_to_a_supergroup_is_told_and_refuses_calls_as_telegram_does(
    fake_telegram: FakeTelegram,
) -> None:
    moved_to, moved_from = fake_telegram.upgrade_group(-4001, -1004001)
    old, new = fake_telegram.update(moved_to)["message"], fake_telegram.update(moved_from)["message"]
    assert (old["chat"], old["migrate_to_chat_id"]) == ({"id": -4001, "type": "group", "title": "Test group -4001"},
                                                         -1004001)  # fmt: skip
    assert (new["chat"]["id"], new["chat"]["type"], new["migrate_from_chat_id"]) == (-1004001, "supergroup", -4001)
    async with aiohttp.ClientSession() as http:
        for method in ("sendMessage", "sendChatAction"):
            body = {"chat_id": -4001, "text": "hello", "action": "typing"}
            async with http.post(f"{fake_telegram.api_url}/{method}", json=body) as response:
                assert response.status == 400
                assert await response.json() == {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: group chat was upgraded to a supergroup chat",
                    "parameters": {"migrate_to_chat_id": -1004001},
                }
        body = {"chat_id": -1004001, "text": "hello"}
        async with http.post(f"{fake_telegram.api_url}/sendMessage", json=body) as response:
            assert (await response.json())["ok"] is True
    assert [message.text for message in fake_telegram.sent_messages(-1004001)] == ["hello"]


def test_sync_test_can_wait_for_messages(fake_telegram: FakeTelegram) -> None:
    def send(text: str) -> None:
        time.sleep(0.1)
        request = urllib.request.Request(
            f"{fake_telegram.api_url}/sendMessage",
            data=json.dumps({"chat_id": CHAT, "text": text}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.load(response)["ok"] is True

    threads = [threading.Thread(target=send, args=(text,)) for text in ("a", "b")]
    for thread in threads:
        thread.start()
    messages = fake_telegram.wait_for_messages(CHAT, 2, timeout=5)
    for thread in threads:
        thread.join()
    assert sorted(m.text for m in messages) == ["a", "b"]
    with pytest.raises(TimeoutError, match="3 message"):
        fake_telegram.wait_for_messages(CHAT, 3, timeout=0.2)


# ------------------------------------------------------------------------------ text rules


@pytest.mark.parametrize(
    ("source", "text", "entities"),
    [
        ("<b>bold</b> <I>it</I>", "bold it", [("bold", 0, 4), ("italic", 5, 2)]),
        ('<a href="https://x.y/?a=1&amp;b=2">link</a>', "link", [("text_link", 0, 4)]),
        ('<pre><code class="language-python">x = 1</code></pre>', "x = 1", [("pre", 0, 5)]),
        ('<span class="tg-spoiler">s</span><tg-spoiler>t</tg-spoiler>', "st", [("spoiler", 0, 1), ("spoiler", 1, 1)]),
        ("<blockquote expandable>quote</blockquote>", "quote", [("expandable_blockquote", 0, 5)]),
        ('<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>!', "👍!", [("custom_emoji", 0, 2)]),
        ("1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;&#33;&#x3F;", '1 < 2 && 3 > 2 "!?', []),
        ("<u>a<s>b</s></u>", "ab", [("underline", 0, 2), ("strikethrough", 1, 1)]),
    ],
)
def test_html_parsing_accepts_telegram_html(source: str, text: str, entities: list[tuple[str, int, int]]) -> None:
    parsed = parse_html(source)
    assert parsed.text == text
    assert [(e["type"], e["offset"], e["length"]) for e in parsed.entities] == entities


def test_html_parsing_keeps_link_and_language() -> None:
    link = parse_html('<a href="https://x.y/?a=1&amp;b=2">link</a>').entities[0]
    assert link["url"] == "https://x.y/?a=1&b=2"
    assert parse_html('<pre><code class="language-python">x</code></pre>').entities[0]["language"] == "python"
    assert "language" not in parse_html('<code class="language-python">x</code>').entities[0]


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("<b>bold", "Can't find end tag corresponding to start tag b"),
        ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
        ("<div>x</div>", 'Unsupported start tag "div" at byte offset 0'),
        ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
        ("é<br/>", 'Unsupported start tag "br/" at byte offset 2'),
        ("<span>x</span>", 'Tag "span" must have class "tg-spoiler"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ("<b", "Unclosed start tag at byte offset 0"),
        ("AT&T", "Character '&' at byte offset 2"),
    ],
)
def test_html_parsing_rejects_what_telegram_rejects(source: str, error: str) -> None:
    with pytest.raises(BotApiError) as raised:
        format_text(source, "HTML")
    assert raised.value.error_code == 400
    assert raised.value.description.startswith("Bad Request: can't parse entities: ")
    assert error in raised.value.description


def test_text_length_counts_utf16_after_parsing() -> None:
    assert utf16_len("a😀") == 3
    assert format_text("<b>" + "a" * 4096 + "</b>", "HTML").text == "a" * 4096  # tags are free
    assert len(format_text("&lt;" * 4096, "html").text) == 4096
    for too_long in ("a" * 4097, "😀" * 2049, "&amp;" * 4097):
        with pytest.raises(BotApiError, match="message is too long"):
            format_text(too_long, "HTML")
    assert format_text("AT&T", "HTML", strict_ampersand=False).text == "AT&T"  # real Telegram
    trimmed = format_text("  <b>x</b>  ", "HTML")
    assert (trimmed.text, trimmed.entities[0]["offset"]) == ("x", 0)
    with pytest.raises(BotApiError, match="unsupported parse_mode"):
        format_text("x", "XML")


def test_explicit_entities_are_checked_against_utf16_length() -> None:
    assert format_text("😀 hi", entities=[{"type": "bold", "offset": 3, "length": 2}]).entities
    with pytest.raises(BotApiError, match="ends after the end of the text"):
        format_text("😀 hi", entities=[{"type": "bold", "offset": 3, "length": 3}])
    with pytest.raises(BotApiError, match="begins after the end"):
        format_text("hi", entities=[{"type": "bold", "offset": 5, "length": 1}])
    with pytest.raises(BotApiError, match="unsupported entity type"):
        format_text("hi", entities=[{"type": "blink", "offset": 0, "length": 1}])


def test_pushed_messages_look_like_telegram_updates(fake_telegram: FakeTelegram) -> None:
    update_id = fake_telegram.push_message(GROUP, "/ask@test_bot what is 😀 @alice_b", user_id=5, username="bob")
    message = fake_telegram.update(update_id)["message"]
    assert message["chat"]["type"] == "supergroup" and message["from"]["username"] == "bob"
    assert [(e["type"], e["offset"], e["length"]) for e in message["entities"]] == [
        ("bot_command", 0, 13), ("mention", 25, 8),
    ]  # fmt: skip
    reply_id = fake_telegram.push_message(CHAT, "answer me", reply_to_bot=True)
    assert fake_telegram.update(reply_id)["message"]["reply_to_message"]["from"]["is_bot"] is True
    edit_id = fake_telegram.push_edited_message(CHAT, message_id=1, text="edited")
    assert fake_telegram.update(edit_id)["edited_message"]["text"] == "edited"
    voice = fake_telegram.update(fake_telegram.push_voice(CHAT, duration=3))["message"]["voice"]
    assert voice["duration"] == 3 and voice["mime_type"] == "audio/ogg"
    document = fake_telegram.update(fake_telegram.push_document(CHAT, caption="/summarize"))["message"]
    assert document["caption_entities"][0]["type"] == "bot_command"
    assert fake_telegram.update(fake_telegram.push_sticker(CHAT))["message"]["sticker"]["emoji"] == "👍"

"""The Telegram channel end to end, once per backend (ptb, aiogram): what the user sends on Telegram
(through the fake Bot API server), what the model is asked, and what the bot sends back."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bot.access.pairing import PairingStore, pairing_file
from bot.channels.telegram_channel import TelegramChannel, TelegramStartError
from bot.channels.telegram_format import TELEGRAM_MESSAGE_LIMIT, render_markdown, utf16_len
from bot.channels.telegram_updates import ALLOWED_UPDATES
from bot.domain.inbound import InboundMessage
from bot.ledger.store import LedgerFile
from bot.ledger.turns import TurnLedger
from tests.channels.telegram_harness import (
    GROUP,
    OWNER,
    WEBHOOK_SECRET,
    RunningBot,
    start_bot,
    start_webhook_bot,
    telegram_channel_alone,
)
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.clock import ManualClock
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import BotApiError, FakeTelegram, Fault

STRANGER = 5555


def users_said(fake_openai: FakeOpenAI) -> list[str]:
    """The user turns of the last conversation request (not the knowledge graph's extraction calls)."""
    return [m["content"] for m in fake_openai.conversation_requests()[-1]["messages"] if m["role"] == "user"]


async def ask(fake_telegram: FakeTelegram, chat: int, text: str, **options: object) -> str:
    """Send `text` in `chat` and return the bot's next reply there."""
    before = len(fake_telegram.sent_messages(chat))
    fake_telegram.push_message(chat, text, **options)  # type: ignore[arg-type]
    return (await fake_telegram.await_messages(chat, before + 1))[-1].text


async def test_a_conversation(bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI) -> None:
    fake_openai.script("Hello **Ann**!", "You are Ann.")
    fake_telegram.push_message(OWNER, "my name is Ann")
    first = (await fake_telegram.await_messages(OWNER, 1))[0]
    assert (first.text, first.entities) == ("Hello Ann!", [{"type": "bold", "offset": 6, "length": 3}])
    assert await ask(fake_telegram, OWNER, "who am I?") == "You are Ann."
    assert users_said(fake_openai) == ["my name is Ann", "who am I?"]
    assert "typing" in fake_telegram.chat_actions(OWNER)
    assert (bot.workspace / "sessions" / f"telegram:{OWNER}.json").is_file()
    polls = fake_telegram.calls_to("getUpdates")
    assert polls and polls[-1].params["allowed_updates"] == ALLOWED_UPDATES


async def test_every_command_is_registered_and_answered(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    commands = bot.app.commands.commands()
    assert [c["command"] for c in fake_telegram.commands()] == [c.name for c in commands]
    await ask(fake_telegram, OWNER, "hello")
    for command in commands:
        reply = await ask(fake_telegram, OWNER, f"/{command.name}")
        assert reply.strip(), f"/{command.name} got an empty reply"
    assert "Unknown command /frobnicate" in await ask(fake_telegram, OWNER, "/frobnicate")
    assert "/new" in await ask(fake_telegram, OWNER, "/help")
    assert "Messages: 0" in await ask(fake_telegram, OWNER, "/status")  # /new above cleared it


async def test_a_long_reply_is_split_into_valid_parts(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    paragraphs = [f"Paragraph {n}: **important** point, with `code` and a <tag> & more. " * 4 for n in range(32)]
    reply = "\n\n".join(paragraphs) + "\n\n```python\n" + "print('x')\n" * 80 + "```"
    assert len(reply) > 9000
    fake_openai.script(reply)
    fake_telegram.push_message(OWNER, "tell me everything")
    await fake_telegram.await_messages(OWNER, 3)
    await bot.app.router.dispatcher.drain()
    parts = fake_telegram.sent_messages(OWNER)
    assert len(parts) >= 3
    assert all(0 < utf16_len(part.text) <= TELEGRAM_MESSAGE_LIMIT for part in parts)
    assert all(part.entities for part in parts)  # every part kept its formatting
    whole = render_markdown(reply).text
    assert "".join(part.text for part in parts).replace("\n", "") == whole.replace("\n", "")
    assert fake_telegram.visible_text(OWNER) == [part.text for part in parts]


async def test_edits_replace_the_text_and_an_identical_edit_is_fine(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    channel = bot.app.channels[0]
    message_id = await channel.send_text(str(OWNER), "draft **one**")
    assert message_id is not None
    await channel.edit_text(str(OWNER), message_id, "final **two**")
    await channel.edit_text(str(OWNER), message_id, "final **two**")  # Telegram: "message is not modified"
    assert fake_telegram.visible_text(OWNER) == ["final two"]
    assert [e.entities for e in fake_telegram.edits(OWNER)] == [[{"type": "bold", "offset": 6, "length": 3}]]


STREAM_INTERVAL = 1.0


@pytest.fixture
def stream_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def quick_stream_bot(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str, stream_clock: ManualClock
) -> AsyncIterator[RunningBot]:
    """The bot with streamed replies shown every `STREAM_INTERVAL` of `stream_clock`, which the test moves on."""
    config = {"toolLoop": {"streamEditIntervalSeconds": STREAM_INTERVAL}}
    running = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    [channel] = running.app.channels
    assert isinstance(channel, TelegramChannel)
    channel.clock = stream_clock
    yield running
    await running.stop()


async def test_a_streamed_reply_in_a_group_is_edited_in_place_and_rolls_over_before_the_limit(
    quick_stream_bot: RunningBot, fake_telegram: FakeTelegram, stream_clock: ManualClock
) -> None:
    stream = quick_stream_bot.app.channels[0].open_stream(str(GROUP))
    assert stream is not None
    await stream.update("Thinking")  # too soon: nothing is shown yet
    assert fake_telegram.sent_messages(GROUP) == []
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update("First **part**")
    assert fake_telegram.visible_text(GROUP) == ["First part"]
    long_text = "First **part**\n\n" + "word " * 1000
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update(long_text)
    await stream.update(long_text + "more")  # within the interval: skipped
    await stream.finish(long_text + "the end.")
    shown = fake_telegram.visible_text(GROUP)
    # The first paragraph stays where it was shown; the words fill a message and roll over into the next.
    assert len(shown) == 3 and all(utf16_len(text) <= TELEGRAM_MESSAGE_LIMIT for text in shown)
    assert shown[0] == "First part" and shown[2].endswith("the end.")
    assert len(fake_telegram.sent_messages(GROUP)) == 3
    assert fake_telegram.drafts(GROUP) == []


async def test_a_streamed_reply_in_a_private_chat_grows_as_a_draft_and_ends_as_messages(
    quick_stream_bot: RunningBot, fake_telegram: FakeTelegram, stream_clock: ManualClock
) -> None:
    stream = quick_stream_bot.app.channels[0].open_stream(str(OWNER))
    assert stream is not None
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update("First **part**")
    assert [d.text for d in fake_telegram.drafts(OWNER)] == ["First part"]
    assert fake_telegram.sent_messages(OWNER) == []
    long_text = "First **part**\n\n" + "word " * 1000
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update(long_text)
    # What fills a message is sent for good; only the part still growing is a draft.
    assert len(fake_telegram.sent_messages(OWNER)) == 2
    await stream.finish(long_text + "the end.")
    shown = fake_telegram.visible_text(OWNER)
    assert len(shown) == 3 and shown[0] == "First part" and shown[2].endswith("the end.")
    assert all(utf16_len(text) <= TELEGRAM_MESSAGE_LIMIT for text in shown)
    assert fake_telegram.edits(OWNER) == []
    assert len({d.draft_id for d in fake_telegram.drafts(OWNER)}) == 1


async def test_a_live_update_on_its_way_when_the_turn_is_stopped_is_not_cut_short(
    quick_stream_bot: RunningBot, fake_telegram: FakeTelegram, stream_clock: ManualClock
) -> None:
    # A Bot API request cancelled on its way can hold its pooled connection for good (encode/httpcore#1093):
    # a /stop cancels the turn, and the update it was sending finishes beside the stop.
    fake_telegram.fail_next("sendMessageDraft", Fault.slow(0.4))
    stream = quick_stream_bot.app.channels[0].open_stream(str(OWNER))
    assert stream is not None
    stream_clock.advance(STREAM_INTERVAL)
    showing = asyncio.create_task(stream.update("Half an"))
    await fake_telegram.await_until(lambda: len(fake_telegram.calls_to("sendMessageDraft")) == 1)  # on its way
    showing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await showing
    await fake_telegram.await_until(lambda: fake_telegram.calls_to("sendMessageDraft")[0].status is not None)
    [draft] = fake_telegram.calls_to("sendMessageDraft")
    assert draft.status == 200  # 499 when the client went away before the call arrived
    assert [d.text for d in fake_telegram.drafts(OWNER)] == ["Half an"]


async def test_when_drafts_are_refused_the_stream_edits_a_message_instead(
    quick_stream_bot: RunningBot, fake_telegram: FakeTelegram, stream_clock: ManualClock
) -> None:
    def unknown_method(_: dict[str, object]) -> None:
        raise BotApiError(404, "Not Found")  # a Bot API server older than drafts

    fake_telegram.register_method("sendMessageDraft", unknown_method)
    stream = quick_stream_bot.app.channels[0].open_stream(str(OWNER))
    assert stream is not None
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update("Half an")
    stream_clock.advance(STREAM_INTERVAL)
    await stream.update("Half an answer")
    await stream.finish("Half an answer, whole.")
    assert fake_telegram.visible_text(OWNER) == ["Half an answer, whole."]
    assert len(fake_telegram.sent_messages(OWNER)) == 1 and len(fake_telegram.edits(OWNER)) == 2


async def test_a_quick_streamed_reply_is_one_message(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    assert bot.app.config_store.in_force().tool_loop.streaming
    fake_openai.script("A **quick** answer.")
    assert await ask(fake_telegram, OWNER, "hi") == "A quick answer."
    assert fake_telegram.edits(OWNER) == []


async def test_refused_formatting_is_sent_again_as_plain_text(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("This is **bold** and `code`.")
    fake_telegram.fail_next("sendMessage", Fault.cant_parse_entities())
    assert await ask(fake_telegram, OWNER, "format something") == "This is bold and code."
    refused, delivered = fake_telegram.calls_to("sendMessage")
    assert refused.status == 400 and refused.params["entities"]
    assert delivered.ok and "entities" not in delivered.params
    assert len(fake_telegram.sent_messages(OWNER)) == 1


async def test_a_reply_whose_formatting_leaves_no_text_is_sent_as_written(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("```\n```", "#")
    assert await ask(fake_telegram, OWNER, "an empty code block?") == "```\n```"
    assert await ask(fake_telegram, OWNER, "a heading alone?") == "#"
    assert all(call.ok for call in fake_telegram.calls_to("sendMessage"))


async def test_a_part_telegram_finds_too_long_is_sent_again_in_halves(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    answer = "\n".join(f"Line {n} of a long **answer**." for n in range(150))
    fake_openai.script(answer)
    fake_telegram.fail_next("sendMessage", Fault.too_long())
    fake_telegram.push_message(OWNER, "tell me everything")
    shown = [m.text for m in await fake_telegram.await_messages(OWNER, 2)]
    await asyncio.sleep(0.3)  # nothing more follows
    assert len(fake_telegram.sent_messages(OWNER)) == 2
    assert all(utf16_len(text) <= TELEGRAM_MESSAGE_LIMIT // 2 for text in shown)
    assert "\n".join(shown) == answer.replace("**", "")
    assert fake_telegram.calls_to("sendMessage")[0].status == 400


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PTB's RetryAfter warns about its own retry_after
async def test_flood_control_is_waited_out_and_delivers_once(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    fake_telegram.fail_next("sendMessage", Fault.rate_limit(retry_after=1))
    assert await ask(fake_telegram, OWNER, "hi") == "echo: hi"
    limited, delivered = fake_telegram.calls_to("sendMessage")
    assert limited.status == 429 and delivered.ok
    assert delivered.time - limited.time >= 0.95
    await bot.app.router.dispatcher.drain()
    assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: hi"]


async def test_server_errors_and_dropped_connections_are_retried_without_duplicates(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.fail_next("sendMessage", Fault.server_error(502, html_body=True))
    fake_telegram.fail_next("sendMessage", Fault.drop_connection())
    fake_telegram.fail_next("sendMessage", Fault.server_error(500))
    assert await ask(fake_telegram, OWNER, "hi") == "echo: hi"
    await bot.app.router.dispatcher.drain()
    assert [c.fault for c in fake_telegram.calls_to("sendMessage")] == [
        "server_error", "drop_connection", "server_error", None,
    ]  # fmt: skip
    assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: hi"]


async def test_a_slow_answer_is_not_sent_twice(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, {"telegram": {"sendTimeoutSeconds": 0.5}})
    try:
        # Telegram applies the send but answers after the bot stopped waiting: a retry would duplicate it.
        fake_telegram.fail_next("sendMessage", Fault.timeout(1.5, apply=True))
        fake_telegram.push_message(OWNER, "hi")
        await fake_telegram.await_messages(OWNER, 1)
        assert await ask(fake_telegram, OWNER, "again") == "echo: again"
        assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: hi", "echo: again"]
    finally:
        await bot.stop()


async def test_an_undeliverable_reply_is_logged_and_the_turn_kept(
    bot: RunningBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake_telegram.fail_next("sendMessage", Fault.server_error(503), times=4)  # every try (deliveryAttempts)
    fake_telegram.push_message(OWNER, "remember the milk")
    await fake_telegram.await_until(lambda: len(fake_telegram.calls_to("sendMessage")) >= 4)
    await bot.app.router.dispatcher.drain()
    session = await bot.app.sessions.get(f"telegram:{OWNER}")
    assert session is not None
    assert [m.content for m in session.messages] == ["remember the milk", "echo: remember the milk"]
    assert fake_telegram.sent_messages(OWNER) == []
    assert "could not be delivered" in caplog.text
    assert await ask(fake_telegram, OWNER, "still there?") == "echo: still there?"


async def test_a_blocked_bot_does_not_retry_and_keeps_the_turn(
    bot: RunningBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    def blocked(params: dict[str, object]) -> object:
        raise BotApiError(403, "Forbidden: bot was blocked by the user")

    fake_telegram.register_method("sendMessage", blocked)
    fake_telegram.push_message(OWNER, "bye")
    await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("sendMessage")))
    await bot.app.router.dispatcher.drain()
    assert len(fake_telegram.calls_to("sendMessage")) == 1  # repeating cannot help
    assert "blocked by the user" in caplog.text
    session = await bot.app.sessions.get(f"telegram:{OWNER}")
    assert session is not None and [m.content for m in session.messages] == ["bye", "echo: bye"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PTB's RetryAfter warns about its own retry_after
async def test_a_flood_wait_longer_than_allowed_gives_the_reply_up(
    bot: RunningBot, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake_telegram.fail_next("sendMessage", Fault.rate_limit(retry_after=3600))
    fake_telegram.push_message(OWNER, "hi")
    await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("sendMessage")))
    await bot.app.router.dispatcher.drain()
    assert "flood control" in caplog.text
    assert await ask(fake_telegram, OWNER, "next") == "echo: next"  # the chat is not held for an hour


async def test_a_redelivered_update_is_answered_once(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    first = fake_telegram.push_message(OWNER, "one")
    await fake_telegram.await_messages(OWNER, 1)
    fake_telegram.redeliver(first)
    assert await ask(fake_telegram, OWNER, "two") == "echo: two"
    assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: one", "echo: two"]


async def test_an_update_redelivered_after_a_restart_is_answered_once(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    first = fake_telegram.push_message(OWNER, "one")
    await fake_telegram.await_messages(OWNER, 1)
    await bot.stop()
    fake_telegram.redeliver(first)  # as if the acknowledgement had been lost in the restart
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        assert await ask(fake_telegram, OWNER, "two") == "echo: two"
        assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: one", "echo: two"]
    finally:
        await bot.stop()


async def test_an_update_is_acknowledged_only_once_the_bot_has_taken_it(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    channel = telegram_channel_alone(workspace_dir, fake_openai, fake_telegram, backend)
    taken: list[str] = []
    release = asyncio.Event()

    async def slow_to_journal(inbound: InboundMessage) -> None:
        taken.append(inbound.text)
        await release.wait()

    await channel.start(slow_to_journal)
    try:
        fake_telegram.push_message(OWNER, "one")
        fake_telegram.push_message(OWNER, "two")
        await fake_telegram.await_until(lambda: taken == ["one"])
        await asyncio.sleep(1.5)  # longer than a long poll: no getUpdates may acknowledge "one" meanwhile
        assert fake_telegram.pending_update_count() == 2
        release.set()
        await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0)
        assert taken == ["one", "two"]
    finally:
        await channel.stop()


async def test_a_message_journaled_before_a_crash_is_not_taken_again_when_redelivered(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
    first = fake_telegram.push_message(OWNER, "one")
    await fake_telegram.await_messages(OWNER, 1)
    await bot.stop()
    # Twice, as if the bot died after recording "one" but before acknowledging it, and then died again just
    # after the restart (which rewrote the ledger), before acknowledging it either.
    for asked in ("two", "three"):
        fake_telegram.redeliver(first)
        bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend)
        try:
            assert await ask(fake_telegram, OWNER, asked) == f"echo: {asked}"
        finally:
            await bot.stop()
    assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: one", "echo: two", "echo: three"]


async def test_in_groups_only_messages_for_the_bot_are_answered(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_telegram.push_message(GROUP, "hello everyone")
    fake_telegram.push_message(GROUP, "/help@other_bot")
    # In a group every message reaches the model with its sender's name (the fake's "User1001").
    assert await ask(fake_telegram, GROUP, "@test_bot what time is it?") == "echo: User1001: what time is it?"
    quoted = '[Replying to you (the assistant): "echo: User1001: what time is it?"]\nUser1001: and tomorrow?'
    assert await ask(fake_telegram, GROUP, "and tomorrow?", reply_to_bot=True) == f"echo: {quoted}"
    assert "Commands:" in await ask(fake_telegram, GROUP, "/help@test_bot")
    assert "Messages: 4" in await ask(fake_telegram, GROUP, "/status")
    fake_telegram.push_message(GROUP, "talking among ourselves", reply_to_message_id=1)
    assert await ask(fake_telegram, GROUP, "thanks @test_bot") == "echo: User1001: thanks"
    assert users_said(fake_openai) == ["User1001: what time is it?", quoted, "User1001: thanks"]
    assert len(fake_telegram.sent_messages(GROUP)) == 5
    assert (bot.workspace / "sessions" / f"telegram:{GROUP}.json").is_file()


async def test_group_gating_follows_runtime_config(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_bot(
        workspace_dir, fake_openai, fake_telegram, backend, {"telegram": {"groups": {"answerAllMessages": True}}}
    )
    try:
        assert await ask(fake_telegram, GROUP, "hello everyone") == "echo: User1001: hello everyone"
    finally:
        await bot.stop()


async def test_other_content_gets_a_clear_reply_or_is_ignored(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("A photo without words.")
    fake_telegram.push_photo(OWNER)  # shown to the model (tests/media has the details)
    assert (await fake_telegram.await_messages(OWNER, 1))[-1].text == "A photo without words."
    fake_telegram.push_voice(OWNER)  # transcribed by the fake model's /audio/transcriptions
    assert (await fake_telegram.await_messages(OWNER, 2))[-1].text == "echo: this is what the voice note says"
    fake_telegram.push_document(OWNER, caption="summarize this please")  # read into the graph, caption answered
    assert (await fake_telegram.await_messages(OWNER, 3))[-1].text.startswith("Reading notes.txt:")
    assert (await fake_telegram.await_messages(OWNER, 4))[-1].text == "echo: summarize this please"
    fake_telegram.push_sticker(OWNER)  # ignored by design
    fake_telegram.push_callback_query(OWNER, "stale button")
    assert await ask(fake_telegram, OWNER, "done") == "echo: done"
    assert len(fake_telegram.sent_messages(OWNER)) == 5
    assert users_said(fake_openai)[-3:] == ["this is what the voice note says", "summarize this please", "done"]
    await fake_telegram.await_until(lambda: any(c.ok for c in fake_telegram.calls_to("answerCallbackQuery")))


async def test_an_update_in_an_older_bot_apis_shape_does_not_stop_the_polling(
    bot: RunningBot, fake_telegram: FakeTelegram
) -> None:
    # A poll as a Bot API server older than the client library sends it (a self-hosted one), without the
    # fields the library's own types now require (persistent_id, allows_revoting, members_only).
    options = [{"text": "yes", "voter_count": 0}, {"text": "no", "voter_count": 0}]
    poll = {"id": "1", "question": "Lunch?", "options": options, "total_voter_count": 0, "is_closed": False,
            "is_anonymous": True, "type": "regular", "allows_multiple_answers": False}  # fmt: skip
    fake_telegram.push_content(OWNER, {"poll": poll})
    fake_telegram.push_message(OWNER, "still there?")
    about_the_poll, answer = await fake_telegram.await_messages(OWNER, 2)
    assert about_the_poll.text == "echo: [Poll: Lunch? Options: yes / no]"
    assert answer.text == "echo: still there?"


async def test_a_contact_a_place_or_a_location_reaches_the_model_as_text(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_telegram.push_content(
        OWNER, {"contact": {"phone_number": "+33612345678", "first_name": "Zoe", "last_name": "Roy"}}
    )
    louvre = {"latitude": 48.8606, "longitude": 2.3376}
    fake_telegram.push_content(
        OWNER, {"location": louvre, "venue": {"location": louvre, "title": "Louvre", "address": "Rue de Rivoli, Paris"}}
    )
    shared = fake_telegram.push_content(
        OWNER, {"location": {"latitude": 45.764, "longitude": 4.8357, "live_period": 900}}
    )
    await fake_telegram.await_messages(OWNER, 3)
    # A live location moving on comes as edits of its message: not a message each time.
    moved = copy.deepcopy(fake_telegram.update(shared)["message"])
    moved["location"] = {"latitude": 45.765, "longitude": 4.836, "live_period": 900}
    fake_telegram.push_update({"edited_message": {**moved, "edit_date": moved["date"] + 60}})
    assert await ask(fake_telegram, OWNER, "thanks") == "echo: thanks"
    assert users_said(fake_openai) == [
        "[Contact: Zoe Roy, +33612345678]",
        "[Place: Louvre, Rue de Rivoli, Paris (48.8606, 2.3376)]",
        "[Location: 45.764, 4.8357]",
        "thanks",
    ]


async def test_a_reply_to_a_message_of_another_chat_gives_the_model_its_quote(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    # "Reply in another chat": Telegram gives the replied message's origin and the part the person quoted.
    channel = {"id": -100900, "type": "channel", "title": "Daily News"}
    origin = {"type": "channel", "chat": channel, "message_id": 5, "date": 0}
    replying = {"external_reply": {"origin": origin, "chat": channel, "message_id": 5}}
    fake_telegram.push_content(
        OWNER, {"text": "is this true?", **replying, "quote": {"text": "Rain all week", "position": 0}}
    )
    fake_telegram.push_content(OWNER, {"text": "and this?", **replying})  # nothing quoted: nothing to give
    await fake_telegram.await_messages(OWNER, 2)
    assert fake_openai.user_texts()[-2:] == ['[Replying to Daily News: "Rain all week"]\nis this true?', "and this?"]


async def test_a_hidden_link_reaches_the_model_with_its_address(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    link = {"type": "text_link", "offset": 5, "length": 12, "url": "https://example.com/a"}
    await ask(fake_telegram, OWNER, "Read this article please", entities=[link])
    assert users_said(fake_openai) == ["Read [this article](https://example.com/a) please"]
    # In a group, after the mention is taken out; offsets count UTF-16 units (the emoji is two).
    mention = {"type": "mention", "offset": 0, "length": 9}
    link = {"type": "text_link", "offset": 17, "length": 4, "url": "https://example.com/b"}
    await ask(fake_telegram, GROUP, "@test_bot see 📎 this", entities=[mention, link])
    assert users_said(fake_openai) == ["User1001: see 📎 [this](https://example.com/b)"]


async def test_an_album_is_one_message_with_its_photos(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("Three lovely photos.")
    fake_telegram.push_album(OWNER, 3, caption="our holiday")
    assert [m.text for m in await fake_telegram.await_messages(OWNER, 1)] == ["Three lovely photos."]
    assert await ask(fake_telegram, OWNER, "thanks") == "echo: thanks"
    [asked, _] = fake_openai.conversation_requests()
    assert fake_openai.user_texts(asked) == ["our holiday"]
    assert len(fake_openai.image_urls(asked)) == 3
    stored = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())["messages"]
    assert [(m["role"], m["content"], len(m.get("media") or [])) for m in stored] == [
        ("user", "our holiday", 3), ("assistant", "Three lovely photos.", 0), ("user", "thanks", 0),
        ("assistant", "echo: thanks", 0),
    ]  # fmt: skip


async def test_a_photo_of_an_album_that_cannot_be_taken_is_said_and_the_rest_answered(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"maxImageBytes": 1000}})
    fake_openai.script("Two photos.")
    too_big = b"\xff\xd8\xff\xe0" + b"x" * 2000
    fake_telegram.push_album(OWNER, caption="look", contents=[too_big, b"\xff\xd8\xff\xe0a", b"\xff\xd8\xff\xe0b"])
    note, answer = await fake_telegram.await_messages(OWNER, 2)
    assert note.text.startswith("That image is") and answer.text == "Two photos."
    assert len(fake_openai.image_urls()) == 2


@pytest.mark.parametrize("caption_on", [0, 2], ids=["caption-first", "caption-last"])
async def test_an_album_addressed_in_a_group_is_one_message_whichever_photo_names_the_bot(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, caption_on: int
) -> None:
    fake_openai.script("Three lovely photos.")
    # Only one photo carries the caption that names the bot; right after, the same member sends another album
    # and a message, neither for the bot, then asks the bot something else.
    fake_telegram.push_album(GROUP, 3, caption="@test_bot what are these?", caption_on=caption_on)
    fake_telegram.push_album(GROUP, 2, contents=[b"\xff\xd8\xff\xe0other-a", b"\xff\xd8\xff\xe0other-b"])
    fake_telegram.push_message(GROUP, "nice ones")
    fake_telegram.push_message(GROUP, "@test_bot thanks")
    replies = await fake_telegram.await_messages(GROUP, 2)
    assert [m.text for m in replies] == ["Three lovely photos.", "echo: User1001: thanks"]
    album, thanks = fake_openai.conversation_requests()
    assert fake_openai.user_texts(album) == ["User1001: what are these?"]
    assert len(fake_openai.image_urls(album)) == 3
    assert fake_openai.user_texts(thanks)[-1] == "User1001: thanks"
    stored = json.loads((bot.workspace / "sessions" / f"telegram:{GROUP}.json").read_text())["messages"]
    assert [(m["content"], len(m.get("media") or [])) for m in stored if m["role"] == "user"] == [
        ("what are these?", 3),
        ("thanks", 0),
    ]
    assert len(fake_telegram.calls_to("getFile")) == 3  # the other album's photos were never fetched


@pytest.mark.parametrize("chat", [GROUP, OWNER], ids=["group", "private"])
async def test_an_album_is_one_message_when_its_photos_are_posted_to_the_webhook_at_once(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str, chat: int
) -> None:
    bot = await start_webhook_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        fake_openai.script("Three photos.")
        updates = fake_telegram.push_album(chat, 3, caption="@test_bot and these?", caption_on=1)
        posted = await asyncio.gather(*(fake_telegram.post_webhook_update(update) for update in updates))
        assert posted == [200, 200, 200]
        assert [m.text for m in await fake_telegram.await_messages(chat)] == ["Three photos."]
        await bot.app.router.dispatcher.drain()
        assert len(fake_telegram.sent_messages(chat)) == 1
        [asked] = fake_openai.conversation_requests()
        assert fake_openai.user_texts(asked) == ["User1001: and these?" if chat == GROUP else "@test_bot and these?"]
        assert len(fake_openai.image_urls(asked)) == 3
    finally:
        await bot.stop()


async def test_an_album_in_a_group_that_does_not_name_the_bot_gets_no_answer_and_no_model_call(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_telegram.push_album(GROUP, 3)
    fake_telegram.push_album(GROUP, 2, caption="our holiday", caption_on=1)
    assert await ask(fake_telegram, GROUP, "@test_bot hello") == "echo: User1001: hello"
    await bot.app.router.dispatcher.drain()
    assert [m.text for m in fake_telegram.sent_messages(GROUP)] == ["echo: User1001: hello"]
    [asked] = fake_openai.conversation_requests()
    assert fake_openai.user_texts(asked) == ["User1001: hello"] and fake_openai.image_urls(asked) == []
    assert fake_telegram.calls_to("getFile") == []
    assert list((bot.workspace / "media").rglob("*")) == []
    # The turn ledger saw the updates, and received the one message only.
    records = [json.loads(line) for line in (bot.workspace / "state" / "turns.jsonl").read_text().splitlines()]
    assert [record["received"]["text"] for record in records if "received" in record] == ["hello"]


async def test_a_photo_of_a_group_album_held_when_the_bot_stops_joins_the_photo_naming_it_after_the_restart(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    config = {"media": {"albumWaitSeconds": 3}}
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    try:
        # The album's first photo, without the caption, waits for the one that names the bot; the bot stops.
        fake_telegram.push_photo(GROUP, content=b"\xff\xd8\xff\xe0the beach", media_group="holiday")
        await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0, what="the photo taken")
    finally:
        await bot.stop()
    assert fake_telegram.pending_update_count() == 0  # acknowledged: Telegram will not deliver it again
    fake_telegram.push_photo(
        GROUP, caption="@test_bot where was this?", content=b"\xff\xd8\xff\xe0the hotel", media_group="holiday"
    )
    fake_openai.script("In Nice, by the sea.")
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    try:
        assert [m.text for m in await fake_telegram.await_messages(GROUP)] == ["In Nice, by the sea."]
        [asked] = fake_openai.conversation_requests()
        assert fake_openai.user_texts(asked) == ["User1001: where was this?"]
        assert len(fake_openai.image_urls(asked)) == 2
        await bot.app.router.dispatcher.drain()
    finally:
        await bot.stop()
    # Handed over, the held photo is no longer kept in the ledger.
    await (ledger := TurnLedger(LedgerFile(workspace_dir / "state" / "turns.jsonl"))).load()
    assert ledger.held("telegram") == []


async def test_a_gif_is_an_animation_not_a_file_to_read(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    # Telegram sends a GIF with a `document` beside its `animation`: it is not a file to read into memory.
    fake_telegram.push_animation(OWNER)
    [note] = await fake_telegram.await_messages(OWNER, 1)
    assert note.text == "I can't watch animations yet. Please type your message."
    fake_telegram.push_animation(OWNER, caption="is this funny?")
    assert (await fake_telegram.await_messages(OWNER, 2))[-1].text == "echo: is this funny?"
    await bot.app.router.dispatcher.drain()
    assert len(fake_telegram.sent_messages(OWNER)) == 2
    assert fake_telegram.calls_to("getFile") == []
    assert users_said(fake_openai) == ["is this funny?"]


async def test_a_forwarded_message_is_given_as_its_authors_words(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    fake_telegram.push_forwarded_message(OWNER, "The meeting moved to 3pm", author="Bob")
    fake_telegram.push_forwarded_message(OWNER, "Sale ends Friday", author="Deals Daily", origin="channel")
    fake_telegram.push_forwarded_message(OWNER, "I live in Lyon", author="Zoe", origin="hidden_user")
    forwarded = [
        "[Forwarded from Bob]\nThe meeting moved to 3pm",
        "[Forwarded from Deals Daily]\nSale ends Friday",
        "[Forwarded from Zoe]\nI live in Lyon",
    ]
    assert [m.text for m in await fake_telegram.await_messages(OWNER, 3)] == [f"echo: {text}" for text in forwarded]
    assert users_said(fake_openai) == forwarded
    await bot.app.router.dispatcher.drain()
    stored = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())["messages"]
    assert [(m["content"], m.get("forwardedFrom")) for m in stored if m["role"] == "user"] == [
        ("The meeting moved to 3pm", "Bob"), ("Sale ends Friday", "Deals Daily"), ("I live in Lyon", "Zoe"),
    ]  # fmt: skip
    [note] = [path for path in (bot.workspace / "memory").glob("*.md") if path.name != "MEMORY.md"]
    assert "User: [Forwarded from Zoe] I live in Lyon |" in note.read_text()


async def test_a_forwarded_command_is_not_run(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    assert await ask(fake_telegram, OWNER, "remember the milk") == "echo: remember the milk"
    # Someone else's words: "/new" from Bob's chat must not clear this conversation, nor "/stop" stop anything.
    for command in ("/new", "/stop"):
        fake_telegram.push_forwarded_message(OWNER, command, author="Bob")
    await fake_telegram.await_messages(OWNER, 3)
    assert users_said(fake_openai)[-2:] == ["[Forwarded from Bob]\n/new", "[Forwarded from Bob]\n/stop"]
    await bot.app.router.dispatcher.drain()
    session = await bot.app.sessions.get(f"telegram:{OWNER}")
    assert session is not None and [m.content for m in session.messages][:2] == [
        "remember the milk",
        "echo: remember the milk",
    ]


@pytest.fixture
async def pairing_bot(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> AsyncIterator[RunningBot]:
    """A bot whose `access.allowedUsers` is empty: strangers get pairing codes."""
    running = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, {"access": {"allowedUsers": []}})
    yield running
    await running.stop()


async def test_a_stranger_is_refused_with_nothing_stored(
    pairing_bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = pairing_bot
    workspace_before = {p for p in bot.workspace.rglob("*") if p.is_file()}
    reply = await ask(fake_telegram, STRANGER, "let me in", username="mallory")
    assert "pairing code" in reply.lower()
    assert await ask(fake_telegram, STRANGER, "/status") == reply  # same code, commands refused too
    await fake_telegram.await_until(lambda: fake_telegram.pending_update_count() == 0)
    await bot.app.router.dispatcher.drain()
    assert fake_openai.chat_requests() == []
    assert bot.session_files() == []
    new_files = {p for p in bot.workspace.rglob("*") if p.is_file()} - workspace_before
    assert {p.relative_to(bot.workspace).as_posix() for p in new_files} <= {
        "access/pairing.json",
        "state/turns.jsonl",  # update ids only
    }
    assert "let me in" not in (bot.workspace / "state" / "turns.jsonl").read_text()
    stored = (bot.workspace / "access" / "pairing.json").read_text()
    assert "let me in" not in stored and "mallory" in stored


async def test_pairing_approve_admits_the_stranger(pairing_bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    bot = pairing_bot
    await ask(fake_telegram, STRANGER, "hello?")
    store = PairingStore(pairing_file(bot.workspace))
    [request] = await store.pending()
    assert request.user_id == STRANGER
    await store.approve(request.code.lower())
    assert await ask(fake_telegram, STRANGER, "hello again") == "echo: hello again"
    assert await store.pending() == []


async def test_with_allowed_users_set_a_stranger_gets_no_code(
    bot: RunningBot, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    assert "not on its list" in await ask(fake_telegram, STRANGER, "hi")
    assert fake_openai.chat_requests() == []
    assert not pairing_file(bot.workspace).exists()


async def test_a_stranger_in_a_group_is_ignored(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    fake_telegram.push_message(GROUP, "@test_bot hi", user_id=STRANGER)
    assert await ask(fake_telegram, GROUP, "@test_bot hi") == "echo: User1001: hi"
    assert len(fake_telegram.sent_messages(GROUP)) == 1
    assert not pairing_file(bot.workspace).exists()


async def test_webhook_with_the_right_and_a_wrong_secret(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    bot = await start_webhook_bot(workspace_dir, fake_openai, fake_telegram, backend)
    try:
        assert fake_telegram.webhook_url.endswith("/telegram/webhook")
        assert fake_telegram.webhook_secret == WEBHOOK_SECRET
        forged = fake_telegram.push_message(OWNER, "forged")
        assert await fake_telegram.post_webhook_update(forged, secret="wrong") == 401
        assert await fake_telegram.post_webhook_update(forged, secret=None) == 401
        real = fake_telegram.push_message(OWNER, "real")
        assert await fake_telegram.post_webhook_update(real) == 200
        assert [m.text for m in await fake_telegram.await_messages(OWNER, 1)] == ["echo: real"]
        assert await fake_telegram.post_webhook_update(real) == 200  # Telegram retrying: answered once
        await bot.app.router.dispatcher.drain()
        assert [m.text for m in fake_telegram.sent_messages(OWNER)] == ["echo: real"]
        assert users_said(fake_openai) == ["real"]
        assert bot.listener is not None
        assert fake_telegram.calls_to("getUpdates") == []
        root = f"http://127.0.0.1:{bot.listener.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{root}/healthz") as health:
                report = await health.json()
                assert health.status == 200 and report["status"] == "ok"
                assert report["channels"] == {"telegram": True} and report["scheduler"] is True
                assert report["lastModelCall"]["outcome"] == "ok"
            async with http.get(f"{root}/metrics") as metrics:
                assert metrics.status == 200 and metrics.headers["Content-Type"].startswith("text/plain")
                text = await metrics.text()
                assert 'bot_messages_in_total{channel="telegram"} 1.0' in text
                assert 'bot_replies_out_total{channel="telegram"} 1.0' in text
    finally:
        await bot.stop()


async def test_polling_recovers_after_an_outage(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    await fake_telegram.await_until(lambda: bool(fake_telegram.calls_to("getUpdates")))
    fake_telegram.go_down()
    await fake_telegram.await_until(lambda: any(c.error for c in fake_telegram.calls_to("getUpdates")))
    fake_telegram.push_message(OWNER, "are you there?")
    fake_telegram.come_up()
    assert [m.text for m in await fake_telegram.await_messages(OWNER, 1, timeout=15)] == ["echo: are you there?"]


async def test_fifty_chats_at_once_are_all_answered_once_in_order(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    chats = list(range(7000, 7050))
    # What is measured here is the channel and the queues: memory and RAG (tested elsewhere) stay off.
    config = {"access": {"allowedUsers": chats}, "memory": {"enabled": False}, "rag": {"enabled": False}}
    bot = await start_bot(workspace_dir, fake_openai, fake_telegram, backend, config)
    try:
        for number in range(10):
            for chat in chats:
                fake_telegram.push_message(chat, f"{chat}-{number}")
        started = time.monotonic()
        while len(fake_telegram.sent_messages()) < 500:  # checked rarely: each check walks every recorded call
            assert time.monotonic() - started < 60, f"{len(fake_telegram.sent_messages())} of 500 replies in 60 s"
            await asyncio.sleep(0.25)
        elapsed = time.monotonic() - started
        await bot.app.router.dispatcher.drain()
        for chat in chats:
            assert fake_telegram.visible_text(chat) == [f"echo: {chat}-{n}" for n in range(10)]
        assert len(fake_telegram.sent_messages()) == 500, f"{elapsed:.1f}s"
    finally:
        await bot.stop()


async def test_shutdown_is_quick_and_saves_what_was_seen(bot: RunningBot, fake_telegram: FakeTelegram) -> None:
    assert await ask(fake_telegram, OWNER, "hi") == "echo: hi"
    started = time.monotonic()
    await asyncio.wait_for(bot.stop(), 10)
    assert time.monotonic() - started < 5
    path = bot.workspace / "state" / "turns.jsonl"
    assert await TurnLedger(LedgerFile(path)).load() == []  # answered and recorded delivered
    [seen] = [json.loads(line)["seen"] for line in path.read_text().splitlines() if line.startswith('{"seen"')]
    assert len(seen) == 1  # its update id, so a redelivery is not answered again


async def test_a_wrong_token_stops_the_start_with_a_clear_error(
    workspace_dir: Path, fake_openai: FakeOpenAI, fake_telegram: FakeTelegram, backend: str
) -> None:
    channel = telegram_channel_alone(workspace_dir, fake_openai, fake_telegram, backend, token="999:WRONG")
    with pytest.raises(TelegramStartError, match="Unauthorized") as raised:
        await channel.start(lambda inbound: asyncio.sleep(0))
    assert "WRONG" not in str(raised.value)  # the error is printed: it must not carry the token
    await channel.stop()

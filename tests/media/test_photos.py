"""Photos and images sent as files: what the model is shown, what is kept on disk, and the clear
answers when the model cannot see or the file is too big. Real Telegram clients against the fake
Bot API (getFile and the file download), the real `openai` client against the fake model."""

from __future__ import annotations

import base64
import json
import os
import re
import struct
from pathlib import Path

import pytest

from bot.media.pixels import PNG_SIGNATURE
from tests.channels.telegram_harness import OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI, Fault
from tests.fakes.telegram_server import FakeTelegram

JPEG = b"\xff\xd8\xff\xe0" + b"a cat on a red sofa" * 40


async def reply_count(fake_telegram: FakeTelegram, count: int) -> str:
    return (await fake_telegram.await_messages(OWNER, count, timeout=15))[-1].text


def session_file(workspace: Path) -> Path:
    return workspace / "sessions" / f"telegram:{OWNER}.json"


def every_file_text(workspace: Path) -> str:
    return "\n".join(path.read_bytes().decode("utf-8", "replace") for path in workspace.rglob("*") if path.is_file())


async def test_a_photo_goes_to_the_model_as_a_data_url_and_is_kept_as_a_file(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("A cat on a red sofa. It looks comfortable.")
    fake_telegram.push_photo(OWNER, caption="what is this?", content=JPEG)
    assert await reply_count(fake_telegram, 1) == "A cat on a red sofa. It looks comfortable."

    [url] = fake_openai.image_urls()
    assert url == "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()
    [user] = [m for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    # The largest size Telegram offers within the pixel budget (the full size here) was fetched.
    assert not fake_telegram.calls_to("getFile")[-1].params["file_id"].endswith("_thumb")

    stored = json.loads(session_file(bot.workspace).read_text())
    [message] = [m for m in stored["messages"] if m["role"] == "user"]
    assert message["content"] == "what is this?"
    [media] = message["media"]
    assert media["kind"] == "image" and media["mime"] == "image/jpeg" and media["path"].startswith("media/")
    assert (bot.workspace / media["path"]).read_bytes() == JPEG
    everything = every_file_text(bot.workspace)
    assert base64.b64encode(JPEG).decode()[:40] not in everything  # no base64 anywhere on disk
    assert fake_telegram.token not in everything  # the file URL (with the token) is stored nowhere
    for request in fake_openai.requests:
        assert fake_telegram.token not in json.dumps(request.json)


async def test_older_images_become_a_short_stand_in(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"imagesInPrompt": 2}})
    for n in range(4):
        fake_openai.script(f"Photo {n} shows a lighthouse. Nice light.")
        fake_telegram.push_photo(OWNER, caption=f"photo {n}", content=JPEG + bytes([n]))
        await reply_count(fake_telegram, n + 1)
    urls = fake_openai.image_urls()
    assert [base64.b64decode(url.split(",", 1)[1])[-1] for url in urls] == [2, 3]
    texts = fake_openai.user_texts()
    assert texts[0] == "[Image sent earlier: you said of it: Photo 0 shows a lighthouse]\nphoto 0"
    assert texts[1].startswith("[Image sent earlier: you said of it: Photo 1")


async def test_a_model_without_vision_by_setting_is_said_once_and_the_caption_used(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start({"media": {"visionEnabled": False}})
    fake_telegram.push_photo(OWNER, content=JPEG)
    reply = await reply_count(fake_telegram, 1)
    assert "can't see images" in reply and "caption" in reply
    assert fake_openai.chat_requests() == []  # nothing to answer without a caption
    fake_openai.script("Looks like a sofa.", "Still a sofa.")
    fake_telegram.push_photo(OWNER, caption="is this a sofa?", content=JPEG)
    first = await reply_count(fake_telegram, 3)
    note = (await fake_telegram.await_messages(OWNER, 3))[1].text
    assert "can't see images" in note and "caption alone" in note and first == "Looks like a sofa."
    fake_telegram.push_photo(OWNER, caption="and now?", content=JPEG)
    assert await reply_count(fake_telegram, 4) == "Still a sofa."  # said once: no second note
    assert fake_openai.image_urls() == []
    assert fake_telegram.calls_to("getFile") == []  # nothing fetched for a model that cannot see


async def test_a_model_the_endpoint_says_is_blind_is_answered_from_the_caption(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    fake_openai.script(
        Fault.status(400, "Invalid content type. image_url is only supported by certain models."),
        "A sofa, I guess from your words.",
        "Another sofa.",
    )
    fake_telegram.push_photo(OWNER, caption="my new sofa", content=JPEG)
    reply = await reply_count(fake_telegram, 1)
    assert reply.startswith("(The model I use") and "can't see images" in reply
    assert reply.endswith("A sofa, I guess from your words.")
    refused, retried = fake_openai.chat_requests()[-2:]
    assert fake_openai.image_urls(refused) and fake_openai.image_urls(retried) == []
    assert fake_openai.user_texts(retried)[-1] == "[Image sent earlier: caption: my new sofa]\nmy new sofa"
    fake_telegram.push_photo(OWNER, caption="and this one", content=JPEG)
    assert await reply_count(fake_telegram, 2) == "Another sofa."  # once: no note, no image tried
    assert fake_openai.image_urls() == []


async def test_an_image_sent_as_a_file_is_a_photo_and_a_pdf_stays_a_document(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    await start()
    png = b"\x89PNG\r\n\x1a\n" + b"diagram" * 30
    fake_openai.script("A diagram of three boxes.")
    fake_telegram.push_document(OWNER, content=png, file_name="diagram.png", mime_type="image/png", caption="explain")
    assert await reply_count(fake_telegram, 1) == "A diagram of three boxes."
    assert fake_openai.image_urls() == ["data:image/png;base64," + base64.b64encode(png).decode()]


async def test_an_image_file_is_counted_by_the_size_in_its_header(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    png = PNG_SIGNATURE + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 1280, 720, 8, 2, 0, 0, 0)
    fake_openai.script("A wide chart.")
    fake_telegram.push_document(OWNER, content=png, file_name="chart.png", mime_type="image/png", caption="read it")
    await reply_count(fake_telegram, 1)
    [user] = [m for m in json.loads(session_file(bot.workspace).read_text())["messages"] if m["role"] == "user"]
    assert (user["media"][0]["width"], user["media"][0]["height"]) == (1280, 720)


async def test_an_image_over_the_limit_gets_a_clear_answer_and_nothing_is_kept(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start({"media": {"maxImageBytes": 1000}})
    fake_telegram.push_photo(OWNER, caption="look", content=JPEG + b"x" * 2000)
    reply = await reply_count(fake_telegram, 1)
    assert reply == "That image is 2.8 kB; I take images up to 1.0 kB."
    assert fake_openai.chat_requests() == []
    assert not (bot.workspace / "media").exists()


async def test_a_hundred_photos_keep_the_session_small(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, backend: str
) -> None:
    if backend != "ptb":
        pytest.skip("the sizes on disk do not depend on the Telegram backend; measured once, with ptb")
    bot = await start({"media": {"imagesInPrompt": 3}, "rag": {"enabled": False}})
    photo = os.urandom(60_000)
    for n in range(100):
        fake_telegram.push_photo(OWNER, caption=f"photo {n}", content=photo, width=1280, height=960)
    await fake_telegram.await_messages(OWNER, 100, timeout=120)
    await bot.stop()  # measured as the bot leaves it: the memory index's write-ahead log folded in
    session_bytes = session_file(bot.workspace).stat().st_size
    archive_bytes = (bot.workspace / "sessions" / "archive" / f"telegram:{OWNER}.jsonl").stat().st_size
    media_bytes = sum(path.stat().st_size for path in (bot.workspace / "media").rglob("*") if path.is_file())
    files = [path for path in bot.workspace.rglob("*") if path.is_file()]
    memory_bytes = sum(path.stat().st_size for path in (bot.workspace / "memory").rglob("*") if path.is_file())
    print(
        f"100 photos of 60 kB: session {session_bytes} bytes, archive {archive_bytes} bytes, "
        f"media files {media_bytes} bytes, memory {memory_bytes} bytes; whole workspace "
        f"{sum(path.stat().st_size for path in files)} bytes in {len(files)} files, "
        f"{sum(path.stat().st_blocks for path in files) * 512} bytes allocated"
    )
    assert media_bytes == 100 * len(photo)
    assert session_bytes < 150_000 and archive_bytes < 150_000  # base64 in the JSON would be over 8 MB
    assert "base64" not in session_file(bot.workspace).read_text()
    assert len(fake_openai.image_urls()) == 3


async def test_images_count_in_the_context_the_bot_budgets(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start({"media": {"imagesInPrompt": 1}, "rag": {"enabled": False}})
    fake_openai.script("A cat.", "A dog.")
    fake_telegram.push_photo(OWNER, caption="what is it?", width=1280, height=720)
    await reply_count(fake_telegram, 1)
    fake_telegram.push_photo(OWNER, caption="and this?", width=1280, height=720)
    await reply_count(fake_telegram, 2)
    stored = json.loads(session_file(bot.workspace).read_text())["messages"]
    assert [(m["media"][0]["width"], m["media"][0]["height"]) for m in stored if m["role"] == "user"] == [
        (1280, 720)
    ] * 2
    fake_telegram.push_message(OWNER, "/context")
    context = await reply_count(fake_telegram, 3)
    conversation = re.search(r"Conversation: ~([\d,]+) tokens in 4 messages", context)
    assert conversation is not None, context
    # The newest photo is sent as an image (1,105 tokens for 1280x720, by OpenAI's tile formula); the older
    # one reaches the model as a one-line stand-in, and counts as that.
    assert 1105 < int(conversation.group(1).replace(",", "")) < 1105 + 200

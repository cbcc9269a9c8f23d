"""The owner is told what they must know once, on their own chat, and not again after a restart."""

from __future__ import annotations

import json
from pathlib import Path

from bot.notices import OwnerNotices
from tests.channels.telegram_harness import OWNER
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.telegram_server import FakeTelegram


class Outbox:
    """The owner's chat as the notices see it: records what is sent, or has no owner, or fails."""

    def __init__(self, *, owner: bool = True, failing: bool = False) -> None:
        self.sent: list[str] = []
        self.owner = owner
        self.failing = failing

    async def deliver(self, text: str) -> bool:
        if self.failing:
            raise ConnectionError("Telegram is down")
        if not self.owner:
            return False
        self.sent.append(text)
        return True


async def settled(notices: OwnerNotices) -> None:
    await notices.close()


async def test_a_notice_is_told_once_and_not_again_after_a_restart(tmp_path: Path) -> None:
    told_file = tmp_path / "state" / "owner-notices.json"
    outbox = Outbox()
    notices = OwnerNotices(told_file)
    notices.connect(outbox.deliver)
    notices.tell_once("config:memory.recentDay", "runtime-config.json: unknown key memory.recentDay")
    notices.tell_once("config:memory.recentDay", "runtime-config.json: unknown key memory.recentDay")
    await settled(notices)
    assert outbox.sent == ["runtime-config.json: unknown key memory.recentDay"]
    assert "config:memory.recentDay" in json.loads(told_file.read_text())

    restarted = OwnerNotices(told_file)
    restarted.connect(outbox.deliver)
    restarted.tell_once("config:memory.recentDay", "runtime-config.json: unknown key memory.recentDay")
    await settled(restarted)
    assert len(outbox.sent) == 1


async def test_a_settled_notice_is_told_again_when_its_cause_comes_back(tmp_path: Path) -> None:
    outbox = Outbox()
    notices = OwnerNotices(tmp_path / "told.json")
    notices.connect(outbox.deliver)
    notices.tell_once("window", "the model's window is 6000 tokens")
    await settled(notices)
    notices.settle("window")
    notices.connect(outbox.deliver)
    notices.tell_once("window", "the model's window is 4000 tokens")
    await settled(notices)
    assert outbox.sent == ["the model's window is 6000 tokens", "the model's window is 4000 tokens"]


async def test_notices_raised_before_the_channels_run_go_out_when_they_do(tmp_path: Path) -> None:
    notices = OwnerNotices(tmp_path / "told.json")
    notices.tell_once("a", "first")
    notices.tell_once("b", "second")
    assert notices.pending() == {"a": "first", "b": "second"}
    outbox = Outbox()
    notices.connect(outbox.deliver)
    await settled(notices)
    assert outbox.sent == ["first", "second"]
    assert notices.pending() == {}


async def test_a_failed_delivery_or_no_owner_keeps_the_notice_for_later(tmp_path: Path) -> None:
    told_file = tmp_path / "told.json"
    notices = OwnerNotices(told_file)
    notices.connect(Outbox(failing=True).deliver)
    notices.tell_once("a", "first")
    await settled(notices)
    notices.connect(Outbox(owner=False).deliver)
    await settled(notices)
    assert notices.pending() == {"a": "first"}
    assert not told_file.exists()

    outbox = Outbox()
    notices.connect(outbox.deliver)
    await settled(notices)
    assert outbox.sent == ["first"]


async def test_a_corrupt_record_of_told_notices_is_logged_and_rewritten(tmp_path: Path) -> None:
    told_file = tmp_path / "told.json"
    told_file.write_text("{not json")
    outbox = Outbox()
    notices = OwnerNotices(told_file)
    notices.connect(outbox.deliver)
    notices.tell_once("a", "first")
    await settled(notices)
    assert outbox.sent == ["first"]
    assert list(json.loads(told_file.read_text())) == ["a"]


async def test_the_owner_hears_a_notice_on_their_private_chat_once_across_restarts(
    start: BotFactory, fake_telegram: FakeTelegram
) -> None:
    bot = await start()
    bot.app.notices.tell_once("example", "Something you should know: runtime-config.json has a key in error.")
    [notice] = await fake_telegram.await_messages(OWNER)
    assert notice.text == "Something you should know: runtime-config.json has a key in error."
    await bot.stop()
    session = json.loads((bot.workspace / "sessions" / f"telegram:{OWNER}.json").read_text())
    assert session["messages"][-1]["content"] == notice.text

    again = await start()
    again.app.notices.tell_once("example", "Something you should know: runtime-config.json has a key in error.")
    await again.app.notices.close()
    assert len(fake_telegram.sent_messages(OWNER)) == 1

"""The Telegram backends on their own, against the fake Bot API: what the channel gets from each."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.channels.install import telegram_backend
from bot.channels.telegram_api import ChatUpgraded, Refused, TelegramBackend, TelegramChat
from bot.channels.telegram_updates import ALLOWED_UPDATES
from tests.fakes.telegram_server import FakeTelegram, Fault


@pytest.fixture
async def api(fake_telegram: FakeTelegram, backend: str) -> AsyncIterator[TelegramBackend]:
    """The backend's client, connected to the fake Bot API."""
    client = telegram_backend(backend, fake_telegram.token, fake_telegram.root)
    try:
        await client.connect()
        yield client
    finally:
        await client.close()


async def test_updates_come_as_the_bot_apis_json_and_the_offset_acknowledges_them(
    api: TelegramBackend, fake_telegram: FakeTelegram
) -> None:
    first = fake_telegram.push_message(42, "hello there", first_name="Ada", username="ada")
    second = fake_telegram.push_message(42, "and again", first_name="Ada", username="ada")
    updates = await api.get_updates(None, 0, ALLOWED_UPDATES)
    assert [update["update_id"] for update in updates] == [first, second]
    message = updates[0]["message"]
    assert message["text"] == "hello there"
    assert message["chat"]["id"] == 42
    assert message["from"]["username"] == "ada"  # the Bot API's key, not a library's `from_user`
    assert updates[0] == fake_telegram.update(first)
    later = await api.get_updates(second + 1, 0, ALLOWED_UPDATES)
    assert later == []
    assert fake_telegram.pending_update_count() == 0


async def test_a_token_rejected_while_polling_is_refused_without_quoting_it(
    api: TelegramBackend, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.fail_next("getUpdates", Fault.server_error(401))
    with pytest.raises(Refused, match="Unauthorized") as raised:
        await api.get_updates(None, 0, ALLOWED_UPDATES)
    assert fake_telegram.token.split(":")[1] not in str(raised.value)


async def test_a_send_to_a_group_upgraded_to_a_supergroup_names_the_new_id(
    api: TelegramBackend, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.upgrade_group(-4001, -1004001)
    with pytest.raises(ChatUpgraded) as raised:
        await api.send_message(TelegramChat(-4001), "hello", None, 5.0)
    assert raised.value.new_chat_id == -1004001
    await api.send_message(TelegramChat(-1004001), "hello", None, 5.0)
    assert [message.text for message in fake_telegram.sent_messages(-1004001)] == ["hello"]

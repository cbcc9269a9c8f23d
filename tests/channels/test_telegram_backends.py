"""The Telegram backends on their own, against the fake Bot API: what the channel gets from each."""

from __future__ import annotations

import pytest

from bot.channels.install import telegram_backend
from bot.channels.telegram_api import Refused
from bot.channels.telegram_updates import ALLOWED_UPDATES
from tests.fakes.telegram_server import FakeTelegram, Fault


async def test_updates_come_as_the_bot_apis_json_and_the_offset_acknowledges_them(
    fake_telegram: FakeTelegram, backend: str
) -> None:
    api = telegram_backend(backend, fake_telegram.token, fake_telegram.root)
    try:
        await api.connect()
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
    finally:
        await api.close()


async def test_a_token_rejected_while_polling_is_refused_without_quoting_it(
    fake_telegram: FakeTelegram, backend: str
) -> None:
    api = telegram_backend(backend, fake_telegram.token, fake_telegram.root)
    try:
        await api.connect()
        fake_telegram.fail_next("getUpdates", Fault.server_error(401))
        with pytest.raises(Refused, match="Unauthorized") as raised:
            await api.get_updates(None, 0, ALLOWED_UPDATES)
        assert fake_telegram.token.split(":")[1] not in str(raised.value)
    finally:
        await api.close()

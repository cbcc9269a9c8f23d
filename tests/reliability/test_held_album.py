"""SIGKILL while a photo of a group's album waits for the photo that names the bot: the photo was taken from
Telegram (acknowledged), so only the turn ledger has it; after the restart the album is answered whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.reliability.bot_process import bad_log_lines, start_bot, stop

GROUP, MEMBER = -1005001, 1001


@pytest.mark.parametrize("backend", ["ptb", "aiogram"])
def test_a_held_album_photo_survives_a_kill_and_joins_the_photo_naming_the_bot(tmp_path: Path, backend: str) -> None:
    workspace, log = tmp_path / "workspace", tmp_path / "bot-stderr.log"
    config = {
        "access": {"allowedUsers": [MEMBER]},
        "telegram": {"pollingTimeoutSeconds": 1},
        "media": {"albumWaitSeconds": 5},
    }
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        process = start_bot(workspace, backend, model, telegram, log, config)
        try:
            telegram.push_photo(GROUP, content=b"\xff\xd8\xff\xe0the beach", media_group="holiday", user_id=MEMBER)
            telegram.wait_until(lambda: telegram.pending_update_count() == 0, 30, "the photo taken and acknowledged")
            process.kill()
            process.wait()
        finally:
            if process.poll() is None:
                process.kill()
        telegram.push_photo(
            GROUP, caption="@test_bot where was this?", content=b"\xff\xd8\xff\xe0the hotel", media_group="holiday",
            user_id=MEMBER,
        )  # fmt: skip
        model.script("In Nice, by the sea.")
        process = start_bot(workspace, backend, model, telegram, log, config)
        try:
            assert [m.text for m in telegram.wait_for_messages(GROUP, 1, timeout=60)] == ["In Nice, by the sea."]
            [asked] = model.conversation_requests()
            assert model.user_texts(asked) == ["User1001: where was this?"]
            assert len(model.image_urls(asked)) == 2
        finally:
            stop(process)
        assert bad_log_lines(log) == []

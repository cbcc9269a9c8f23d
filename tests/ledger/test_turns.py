"""`TurnLedger`: each turn received, answered and delivered, durably, and what a restart finds open."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.domain.inbound import InboundMessage
from bot.ledger.turns import REMEMBERED_KEYS, OpenTurn, TurnLedger, TurnState


def message(text: str, key: str | None = None, chat: str = "1") -> InboundMessage:
    return InboundMessage("telegram", chat, "7", text, dedup_key=key)


async def restarted(path: Path) -> tuple[TurnLedger, list[OpenTurn]]:
    ledger = TurnLedger(path)
    return ledger, await ledger.load()


async def test_a_turn_goes_received_answered_delivered_and_a_restart_finds_what_is_open(tmp_path: Path) -> None:
    path = tmp_path / "state" / "turns.jsonl"
    ledger = TurnLedger(path)
    assert await ledger.load() == []
    first = await ledger.received(message("first", "10"))
    second = await ledger.received(message("second", "11"))
    third = await ledger.received(message("third", "12"))
    assert first.journal_id and second.journal_id and third.journal_id
    assert ledger.state(first.journal_id) is TurnState.RECEIVED
    await ledger.answered(first.journal_id, "echo: first")
    await ledger.delivered(first.journal_id)
    await ledger.answered(second.journal_id, "echo: second")  # the crash comes before it is sent
    await ledger.edited(third.journal_id, "third, edited")  # and before this one was begun
    assert ledger.state(first.journal_id) is TurnState.DELIVERED
    assert ledger.state(second.journal_id) is TurnState.ANSWERED

    again, open_turns = await restarted(path)
    assert [(turn.inbound.text, turn.reply) for turn in open_turns] == [
        ("second", "echo: second"),
        ("third, edited", None),
    ]
    assert again.reply(second.journal_id) == "echo: second"
    assert not again.first_sight("telegram", "10")  # its key is: a redelivery is recognised
    # The rewrite at start kept only what is open, and the keys.
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [next(iter(line)) for line in lines] == ["seen", "received", "answered", "received"]


async def test_a_key_is_seen_once_and_made_durable_by_flush_or_by_its_turn(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(path)
    await ledger.load()
    firsts = [ledger.first_sight("telegram", key) for key in ("5", "6", "5", "7", "6")]
    assert firsts == [True, True, False, True, False]
    assert ledger.first_sight("console", "5")  # keys are per channel
    await ledger.received(message("a turn", "7"))  # its record carries its key
    await ledger.flush()
    await ledger.flush()  # nothing new: nothing written
    seen = [json.loads(line)["seen"] for line in path.read_text().splitlines() if line.startswith('{"seen"')]
    assert seen == [[["telegram", "5"], ["telegram", "6"], ["console", "5"]]]

    again, _ = await restarted(path)
    assert [again.first_sight("telegram", key) for key in ("5", "6", "7", "8")] == [False, False, False, True]


async def test_a_delivered_turn_received_again_is_open_again(tmp_path: Path) -> None:
    # /retry answers a delivered message again under its own id: a crash meanwhile leaves it open.
    ledger = TurnLedger(tmp_path / "turns.jsonl")
    await ledger.load()
    turn = await ledger.received(message("hello"))
    assert turn.journal_id is not None
    await ledger.delivered(turn.journal_id)
    again = await ledger.received(
        InboundMessage("telegram", "1", "7", "hello", resumed=True, journal_id=turn.journal_id)
    )
    assert again.journal_id == turn.journal_id
    _, open_turns = await restarted(tmp_path / "turns.jsonl")
    assert [(t.turn_id, t.inbound.resumed) for t in open_turns] == [(turn.journal_id, True)]


async def test_a_torn_last_line_is_skipped_and_cut_off_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(path)
    await ledger.load()
    turn = await ledger.received(message("kept"))
    assert turn.journal_id is not None
    with path.open("a") as handle:
        handle.write('{"delivered": "' + turn.journal_id[:10])  # a crash in the middle of an append
    again = TurnLedger(path)
    assert [t.inbound.text for t in await again.load()] == ["kept"]
    await again.delivered(turn.journal_id)
    assert all(json.loads(line) for line in path.read_text().splitlines())
    assert await TurnLedger(path).load() == []


async def test_the_file_is_compacted_when_it_grows_and_keeps_what_is_open(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(path, compact_after=30)
    await ledger.load()
    waiting = await ledger.received(message("still waiting", "0"))
    for number in range(1, 40):
        turn = await ledger.received(message(f"m{number}", str(number)))
        assert turn.journal_id is not None
        await ledger.answered(turn.journal_id, "ok")
        await ledger.delivered(turn.journal_id)
    assert len(path.read_text().splitlines()) <= 30 + 2  # not the 118 lines appended
    again, open_turns = await restarted(path)
    assert [t.turn_id for t in open_turns] == [waiting.journal_id]
    assert not any(again.first_sight("telegram", str(number)) for number in range(40))


async def test_appends_made_at_once_share_a_write_and_each_is_durable_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(path)
    await ledger.load()
    turns = await asyncio.gather(*(ledger.received(message(f"m{n}", str(n), chat=str(n))) for n in range(50)))
    assert len(path.read_text().splitlines()) == 50
    assert [t.inbound.text for t in await TurnLedger(path).load()] == [t.text for t in turns]


async def test_a_failed_write_raises_and_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(path)
    await ledger.load()
    path.unlink()
    path.mkdir()  # every append now fails the way a full disk does
    try:
        await ledger.received(message("lost to the disk"))
    except OSError:
        pass
    else:
        raise AssertionError("the write cannot have succeeded")
    assert ledger.open_turns() == []
    ledger.first_sight("telegram", "1")
    await ledger.flush()  # logged, not raised: the transport keeps receiving on a full disk


async def test_the_window_of_keys_is_bounded(tmp_path: Path) -> None:
    ledger = TurnLedger(tmp_path / "turns.jsonl")
    await ledger.load()
    for number in range(REMEMBERED_KEYS + 10):
        ledger.first_sight("telegram", str(number))
    await ledger.flush()
    again, _ = await restarted(tmp_path / "turns.jsonl")
    assert not again.first_sight("telegram", str(REMEMBERED_KEYS + 9))
    assert again.first_sight("telegram", "0")  # the oldest fell out of the window


async def test_an_older_versions_inbox_and_update_ids_are_taken_over_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "telegram-updates.json").write_text(json.dumps({"seenUpdateIds": [41, 42]}))
    waiting = {"channel_type": "telegram", "chat_id": "1", "user_id": "7", "text": "hi", "journal_id": "j1"}
    handled = dict(waiting, text="done already", journal_id="j2")
    (state / "inbox.jsonl").write_text(
        "\n".join(json.dumps(r) for r in ({"message": waiting}, {"message": handled}, {"done": "j2"})) + "\n"
    )
    ledger = TurnLedger(state / "turns.jsonl")
    assert [t.turn_id for t in await ledger.load(legacy_state=state)] == ["j1"]
    assert not ledger.first_sight("telegram", "42")
    assert not (state / "inbox.jsonl").exists() and not (state / "telegram-updates.json").exists()

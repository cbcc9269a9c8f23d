"""`TurnLedger` and its `Turn`: each turn received, answered and delivered, durably, and what a restart
finds open and sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.domain.inbound import Attachment, InboundMessage
from bot.domain.message import Message, Quote
from bot.domain.session import AgentSession
from bot.ledger.store import REMEMBERED_KEYS, LedgerFile
from bot.ledger.turns import OpenTurn, SessionLookup, Turn, TurnLedger, TurnState

DATA = Path(__file__).parent / "data"


def message(text: str, key: str | None = None, chat: str = "1", message_id: str | None = None) -> InboundMessage:
    return InboundMessage("telegram", chat, "7", text, dedup_key=key, message_id=message_id)


def sessions(*stored: AgentSession) -> SessionLookup:
    """A session lookup over these sessions, as `TurnLedger.reopen` asks it."""
    by_id = {session.id: session for session in stored}

    async def session_of(session_id: str) -> AgentSession | None:
        return by_id.get(session_id)

    return session_of


async def restarted(path: Path) -> tuple[TurnLedger, list[OpenTurn]]:
    ledger = TurnLedger(LedgerFile(path))
    return ledger, await ledger.load()


async def test_a_turn_goes_received_answered_delivered_and_a_restart_finds_what_is_open(tmp_path: Path) -> None:
    path = tmp_path / "state" / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    assert await ledger.load() == []
    first = await ledger.receive(message("first", "10"))
    second = await ledger.receive(message("second", "11"))
    third = await ledger.receive(message("third", "12"))
    assert first.id and second.id and third.id and first.recorded
    assert ledger.state(first.id) is TurnState.RECEIVED
    await first.answered("echo: first")
    await first.delivered()
    await second.answered("echo: second")  # the crash comes before it is sent
    await third.edited("third, edited")  # and before this one was begun
    assert ledger.state(first.id) is TurnState.DELIVERED and first.settled
    assert ledger.state(second.id) is TurnState.ANSWERED and not second.settled

    again, open_turns = await restarted(path)
    assert [(turn.inbound.text, turn.reply) for turn in open_turns] == [
        ("second", "echo: second"),
        ("third, edited", None),
    ]
    assert not again.first_sight("telegram", "10")  # its key is: a redelivery is recognised
    # The rewrite at start kept only what is open, and the keys.
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [next(iter(line)) for line in lines] == ["seen", "received", "answered", "received"]


def album_photo(number: int, caption: str = "", sender: str = "7") -> InboundMessage:
    photo = Attachment("image", f"file{number}", "image/jpeg", 100, width=800, height=600)
    return InboundMessage("telegram", "1", sender, caption, message_id=str(number), attachment=photo, media_group="g1")


async def test_the_photos_of_an_album_join_its_waiting_turn_and_a_restart_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    first = await ledger.receive(album_photo(1, "our holiday"))
    assert ledger.waiting_album(album_photo(2)) is first
    assert ledger.waiting_album(album_photo(2, sender="8")) is None  # another sender's photos are theirs
    await first.joined(album_photo(2))
    await first.joined(album_photo(3, "the beach"))
    assert first.inbound.text == "our holiday\n\nthe beach"
    assert [photo.file_id for photo in first.inbound.album] == ["file2", "file3"]

    _, [still_open] = await restarted(path)  # a crash before its turn: the whole album is answered
    assert still_open.inbound == first.inbound
    first.begin()
    assert ledger.waiting_album(album_photo(4)) is None  # begun: a late photo is a message of its own


async def test_a_key_is_seen_once_and_made_durable_by_flush_or_by_its_turn(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    firsts = [ledger.first_sight("telegram", key) for key in ("5", "6", "5", "7", "6")]
    assert firsts == [True, True, False, True, False]
    assert ledger.first_sight("console", "5")  # keys are per channel
    await ledger.receive(message("a turn", "7"))  # its record carries its key
    await ledger.flush()
    await ledger.flush()  # nothing new: nothing written
    seen = [json.loads(line)["seen"] for line in path.read_text().splitlines() if line.startswith('{"seen"')]
    assert seen == [[["telegram", "5"], ["telegram", "6"], ["console", "5"]]]

    again, _ = await restarted(path)
    assert [again.first_sight("telegram", key) for key in ("5", "6", "7", "8")] == [False, False, False, True]


async def test_an_update_held_back_is_kept_with_the_flush_until_released_and_a_restart_holds_it_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path), compact_after=3)
    await ledger.load()
    photo = {"update_id": 5, "message": {"media_group_id": "g", "photo": []}}
    assert ledger.first_sight("telegram", "5")
    ledger.hold("telegram", "5", photo)
    await ledger.flush()
    # The held update before its key, in one append: a write cut short never keeps the key without the update.
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"held": ["telegram", "5"], "update": photo},
        {"seen": [["telegram", "5"]]},
    ]
    again, _ = await restarted(path)
    assert again.held("telegram") == [photo] and again.held("console") == []
    assert not again.first_sight("telegram", "5")
    # Kept through a compaction, let go once released.
    for number in range(4):
        turn = await again.receive(message(f"m{number}", str(10 + number)))
        await turn.delivered()
    assert (await restarted(path))[0].held("telegram") == [photo]
    again.release("telegram", "5")
    await again.flush()
    assert (await restarted(path))[0].held("telegram") == []


async def test_a_retry_is_a_new_turn_for_a_delivered_question_and_a_crash_leaves_it_open(tmp_path: Path) -> None:
    # /retry answers a delivered message again under its own id: a crash meanwhile leaves it open.
    ledger = TurnLedger(LedgerFile(tmp_path / "turns.jsonl"))
    await ledger.load()
    turn = await ledger.receive(message("hello"))
    assert turn.id is not None
    await turn.delivered()
    again = await ledger.retry(message("hello"), turn.id)
    assert again is not turn and again.id == turn.id and again.recorded and not again.settled
    assert again.question_stored and again.begun_before  # its question stays in the session: not stored again
    _, open_turns = await restarted(tmp_path / "turns.jsonl")
    assert [t.turn_id for t in open_turns] == [turn.id]


async def test_a_restart_hands_out_each_open_turn_with_what_it_is_to_send(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    await ledger.receive(message("never begun", chat="1", message_id="5"))
    stored = await ledger.receive(message("answer stored, not sent", chat="2"))
    recorded = await ledger.receive(message("reply recorded, not sent", chat="3"))
    cut_short = await ledger.receive(message("cut short after its question was written", chat="4"))
    await recorded.answered("(a note)\n\nThe reply.")
    other_channel = await ledger.receive(InboundMessage("console", "local", "local", "not running now"))
    assert stored.id and cut_short.id and other_channel.id
    chat2, chat4 = AgentSession.new("telegram", "2"), AgentSession.new("telegram", "4")
    chat2.messages += [Message.user("answer stored, not sent", stored.id), Message.assistant("Stored answer.")]
    chat4.messages += [Message.user("cut short after its question was written", cut_short.id)]

    again = TurnLedger(LedgerFile(path))
    turns = await again.reopen(sessions(chat2, chat4), {"telegram"})
    assert [turn.inbound.text for turn in turns] == [
        "never begun", "answer stored, not sent", "reply recorded, not sent", "cut short after its question was written"
    ]  # fmt: skip
    first, second, third, fourth = turns
    empty = AgentSession.new("telegram", "1")
    assert not first.begun_before and first.resume(empty) is None  # handled as if it had just arrived
    assert second.begun_before and second.resume(chat2) == "Stored answer."
    assert third.begun_before and third.resume(AgentSession.new("telegram", "3")) == "(a note)\n\nThe reply."
    assert fourth.begun_before and fourth.resume(chat4) is None  # answered from its stored question
    question = fourth.stored_question(chat4)
    assert question is not None and question.id == cut_short.id
    # Still to be begun: an edit of its message replaces its text, as before the stop.
    assert again.waiting("telegram:1", "5") is first
    await first.edited("never begun, edited")
    assert first.begin().text == "never begun, edited"
    assert again.waiting("telegram:1", "5") is None  # begun: a later edit is a message of its own
    assert [t.turn_id for t in again.open_turns()][-1] == other_channel.id  # kept for a start that has it


async def test_a_turn_the_disk_refused_is_answered_unrecorded_and_an_unrecorded_one_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    refused_sender = await ledger.receive(message("from a stranger"), record=False)
    command = Turn.unrecorded(message("/stop"))
    for turn in (refused_sender, command):
        assert not turn.recorded
        await turn.answered("a reply")
        await turn.delivered()
        assert turn.settled
    assert path.read_text() == ""
    path.unlink()
    path.mkdir()  # every append now fails the way a full disk does
    on_full_disk = await ledger.receive(message("hello"))
    assert not on_full_disk.recorded  # logged; the message is answered all the same
    await on_full_disk.delivered()


async def test_a_torn_last_line_is_skipped_and_cut_off_by_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    turn = await ledger.receive(message("kept"))
    assert turn.id is not None
    with path.open("a") as handle:
        handle.write('{"delivered": "' + turn.id[:10])  # a crash in the middle of an append
    again = TurnLedger(LedgerFile(path))
    [reopened] = await again.reopen(sessions(), {"telegram"})
    assert reopened.inbound.text == "kept"
    await reopened.delivered()
    assert all(json.loads(line) for line in path.read_text().splitlines())
    assert await TurnLedger(LedgerFile(path)).load() == []


async def test_the_file_is_compacted_when_it_grows_and_keeps_what_is_open(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path), compact_after=30)
    await ledger.load()
    waiting = await ledger.receive(message("still waiting", "0"))
    for number in range(1, 40):
        turn = await ledger.receive(message(f"m{number}", str(number)))
        await turn.answered("ok")
        await turn.delivered()
    assert len(path.read_text().splitlines()) <= 30 + 2  # not the 118 lines appended
    again, open_turns = await restarted(path)
    assert [t.turn_id for t in open_turns] == [waiting.id]
    assert not any(again.first_sight("telegram", str(number)) for number in range(40))


async def test_appends_made_at_once_share_a_write_and_each_is_durable_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    turns = await asyncio.gather(*(ledger.receive(message(f"m{n}", str(n), chat=str(n))) for n in range(50)))
    assert len(path.read_text().splitlines()) == 50
    assert [t.inbound.text for t in await TurnLedger(LedgerFile(path)).load()] == [t.inbound.text for t in turns]


async def test_a_failed_write_records_nothing_and_a_failed_flush_is_logged(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    ledger = TurnLedger(LedgerFile(path))
    await ledger.load()
    path.unlink()
    path.mkdir()  # every append now fails the way a full disk does
    turn = await ledger.receive(message("lost to the disk"))
    assert not turn.recorded
    assert ledger.open_turns() == []
    ledger.first_sight("telegram", "1")
    await ledger.flush()  # logged, not raised: the transport keeps receiving on a full disk


async def test_the_window_of_keys_is_bounded(tmp_path: Path) -> None:
    ledger = TurnLedger(LedgerFile(tmp_path / "turns.jsonl"))
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
    ledger = TurnLedger(LedgerFile(state / "turns.jsonl"))
    assert [t.turn_id for t in await ledger.load()] == ["j1"]
    assert not ledger.first_sight("telegram", "42")
    assert not (state / "inbox.jsonl").exists() and not (state / "telegram-updates.json").exists()


async def test_a_ledger_written_with_the_string_bag_is_resumed_with_typed_messages(tmp_path: Path) -> None:
    # The file as the previous release wrote it (its messages' parts as strings in `extra`, a /retry's
    # turn marked `resumed`): every open turn comes back, its parts typed, and is answered from there.
    path = tmp_path / "state" / "turns.jsonl"
    path.parent.mkdir()
    path.write_text((DATA / "turns-with-extra.jsonl").read_text())
    retried = AgentSession.new("telegram", "1")
    retried.messages.append(Message.user("again", "retried-question"))
    ledger = TurnLedger(LedgerFile(path))
    turns = await ledger.reopen(sessions(retried), {"telegram"})
    assert [turn.inbound.text for turn in turns] == [
        "what is this?", "", "summarise it", "typo fixed", "hello", "", "again"
    ]  # fmt: skip
    photo = turns[0].inbound
    assert photo.attachment == Attachment("image", "photo-big", "image/jpeg", 52000, width=1280, height=960)
    assert photo.quote == Quote(author="you (the assistant)", text="Send me a photo")
    assert photo.sender_name == "Ann" and photo.message_id == "20" and not photo.edited
    voice = turns[1].inbound
    assert voice.attachment == Attachment("audio", "voice-1", "audio/ogg", 8000, "voice.ogg", seconds=3)
    document = turns[2].inbound
    assert document.attachment == Attachment("document", "doc-1", "application/pdf", 1234, "notes.pdf")
    assert turns[3].inbound.edited and turns[3].inbound.text == "typo fixed"
    assert turns[4].resume(AgentSession.new("telegram", "1")) == "Hi there!"
    assert turns[5].inbound.notice == "I can't watch videos yet. Please describe what you need in words."
    assert turns[6].id == "retried-question" and turns[6].begun_before  # its question is in the session
    assert len(turns) == 7
    # The rewrite at load writes the typed form, and reads back the same.
    again = await TurnLedger(LedgerFile(path)).load()
    assert [turn.inbound for turn in again] == [turn.inbound for turn in turns]
    assert "extra" not in path.read_text()

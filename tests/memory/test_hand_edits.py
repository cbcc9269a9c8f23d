"""Hand-edited item files are input, not trusted data: what a person types never switches memory off.

A time without a zone is read in the bot's time zone; a line that is not an item is skipped with one
warning naming the file and the line, counted in `/status`, and written back byte for byte by every
rewrite the bot makes (decay, forget, supersede).
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.app import Application
from bot.domain.memory import MemoryItem
from bot.memory.item_files import parse_item_file
from bot.memory.items_store import MemoryItemStore
from bot.memory.maintenance import run_maintenance
from bot.settings import MemoryConfig
from bot.workspace import MemoryPaths
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import configure_memory, memory_section, say

BAD_LINES = [
    "this is not json at all",
    '{"id": "mbad00000001", "layer": "FEELINGS", "type": "fact", "content": "an unknown layer"}',
    '{"id": "mbad00000002", "layer": "SEMANTIC", "type": "fact", "content": "x", "createdAt": "last tuesday"}',
    '{"id": "mbad00000003", "layer": "SEMANTIC", "type": "fact"}',
    "[1, 2, 3]",
]


def good_line(content: str, created: str, item_id: str) -> str:
    record: dict[str, object] = {"id": item_id, "layer": "SEMANTIC", "type": "fact", "content": content}
    record["createdAt"] = created
    record.update(updatedAt=created, confidence=0.9, salience=0.6, tags=[], references=[], source="telegram:1")
    return json.dumps(record)


async def test_a_time_without_a_zone_is_read_in_the_bots_zone_and_the_item_is_used(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    semantic = services.workspace.memory.items_dir / "semantic.jsonl"
    semantic.parent.mkdir(parents=True, exist_ok=True)
    semantic.write_text(good_line("My bicycle is a green Brompton.", "2025-03-02T10:00:00", "mnaive000001") + "\n")
    await say(services, channel, "1", "which bicycle do I have?")
    assert "My bicycle is a green Brompton." in (memory_section(fake_openai.system_prompts()[-1]) or "")
    store = MemoryItemStore(MemoryPaths(services.workspace.memory_dir), UTC)
    store.refresh_sync()
    loaded = store.get("mnaive000001")
    assert loaded is not None and loaded.created_at == datetime(2025, 3, 2, 10, 0, tzinfo=UTC)


async def test_bad_lines_are_skipped_counted_and_kept_byte_for_byte_by_every_rewrite(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    old = (datetime.now(UTC) - timedelta(days=90)).isoformat()
    semantic = services.workspace.memory.items_dir / "semantic.jsonl"
    semantic.parent.mkdir(parents=True, exist_ok=True)
    undecodable = b'{"id": "mbad00000004", "content": "caf\xe9 in latin-1"}'
    lines = [
        good_line("I keep my passport in the blue folder.", old, "mgood0000001").encode(),
        BAD_LINES[0].encode(),
        good_line("My dentist is Dr Okafor.", old, "mgood0000002").encode(),
        *(line.encode() for line in BAD_LINES[1:]),
        undecodable,
        good_line("I take the 7:40 train on Mondays.", old, "mgood0000003").encode(),
    ]
    semantic.write_bytes(b"\n".join(lines) + b"\n")
    bad = [line for line in lines if b"mgood" not in line]

    with caplog.at_level(logging.WARNING):
        await say(services, channel, "1", "where is my passport and who is my dentist?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "blue folder" in memory and "Dr Okafor" in memory  # the good items around the bad lines
    warnings = [r.getMessage() for r in caplog.records if "Skipped line" in r.getMessage()]
    assert len(warnings) == len(bad) and all(str(semantic) in message for message in warnings)
    assert {message.split("Skipped line ")[1].split()[0] for message in warnings} == {"2", "4", "5", "6", "7", "8"}
    status = await say(services, channel, "1", "/status")
    assert f"{len(bad)} unreadable item lines skipped (kept in their files)" in status

    # Decay rewrites the file (the items are 90 days unused): the bad lines stay, in place.
    config = MemoryConfig()
    report = await run_maintenance(services.memory, config, datetime.now(UTC))
    assert report.decayed >= 1
    after = semantic.read_bytes().split(b"\n")
    assert [line for line in after if b"mgood" not in line and line] == bad, after
    assert after[1] == BAD_LINES[0].encode() and after[7] == undecodable

    # Forget rewrites it again.
    assert "Forgot" in await say(services, channel, "1", "/memory forget mgood0000002")
    after = semantic.read_bytes().split(b"\n")
    assert b"Dr Okafor" not in semantic.read_bytes()
    assert [line for line in after if b"mgood" not in line and line] == bad


async def test_a_line_copied_with_its_id_left_as_it_was_is_kept_by_every_rewrite_and_logged(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """A person copies a line to write a new fact and leaves its id: the later line is the item, the earlier
    one is a skipped line, kept in the file and said in the log, never dropped by the bot's next rewrite."""
    created = datetime.now(UTC).isoformat()
    semantic = services.workspace.memory.items_dir / "semantic.jsonl"
    semantic.parent.mkdir(parents=True, exist_ok=True)
    first = good_line("My bike is a RED Brompton.", created, "mcopy0000001")
    lines = [first, good_line("My cat is called MISO.", created, "mcat00000001")]
    lines.append(good_line("My boat is called WAVE.", created, "mcopy0000001"))
    semantic.write_text("\n".join(lines) + "\n")

    with caplog.at_level(logging.WARNING):
        await say(services, channel, "1", "what about my boat, my bike and my cat?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "WAVE" in memory and "MISO" in memory and "RED Brompton" not in memory
    [warning] = [r.getMessage() for r in caplog.records if "Skipped line" in r.getMessage()]
    assert f"Skipped line 1 of {semantic} (kept in the file): id mcopy0000001 is given again on line 3" in warning
    assert "1 unreadable item lines skipped" in await say(services, channel, "1", "/status")

    assert "Forgot" in await say(services, channel, "1", "/memory forget mcat00000001")  # a rewrite of the file
    assert semantic.read_text().splitlines() == [first, lines[2]]


async def test_an_item_dated_in_the_future_is_used_kept_as_written_and_logged(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    semantic = services.workspace.memory.items_dir / "semantic.jsonl"
    semantic.parent.mkdir(parents=True, exist_ok=True)
    written = good_line("My boat is called WAVE.", "2052-06-01T10:00:00+00:00", "mfuture00001")  # 2025 meant
    semantic.write_text(written + "\n")
    with caplog.at_level(logging.WARNING):
        await say(services, channel, "1", "what is my boat called?")
    assert "WAVE" in (memory_section(fake_openai.system_prompts()[-1]) or "")
    [warning] = [r.getMessage() for r in caplog.records if "in the future" in r.getMessage()]
    assert f"Item mfuture00001 of {semantic} is dated 2052-06-01T10:00:00+00:00, in the future" in warning
    assert semantic.read_text() == written + "\n"


async def test_when_the_pack_fails_as_a_whole_the_daily_notes_stand_in(
    services: Application,
    channel: RecordingChannel,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configure_memory(services, legacyDailyNotesEnabled=True)
    await say(services, channel, "1", "I planted three rows of carrots.")

    def broken(*_: object) -> NoReturn:
        raise RuntimeError("a bug in scoring")

    scope = await services.memory.scope(MemoryConfig(), "test:1")
    monkeypatch.setattr(scope.retrieval, "retrieve", broken)
    with caplog.at_level(logging.ERROR):
        await say(services, channel, "2", "what did I plant?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "## Today's Notes" in memory and "three rows of carrots" in memory
    assert any("daily notes stand in" in r.getMessage() for r in caplog.records)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
FIELDS = ["id", "layer", "type", "content", "createdAt", "updatedAt", "confidence", "salience", "tags", "pinned"]


@st.composite
def mutated_item(draw: st.DrawFn) -> str:
    """A valid item with some fields dropped or replaced by arbitrary JSON (often invalid)."""
    record: dict[str, object] = json.loads(good_line("a fact", "2025-01-01T00:00:00+00:00", "mprop0000000"))
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        if draw(st.booleans()):
            record.pop(field, None)
        else:
            record[field] = draw(JSON_VALUES)
    return json.dumps(record)


ANY_LINE = (
    st.text(alphabet=st.characters(exclude_characters="\n\r", exclude_categories=["Cs"]), max_size=60)
    | mutated_item()
    | JSON_VALUES.map(json.dumps)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(noise=st.lists(ANY_LINE, max_size=12), positions=st.lists(st.integers(0, 20), min_size=3, max_size=3))
def test_any_lines_never_break_loading_and_a_rewrite_keeps_every_non_item_line(
    tmp_path: Path, noise: list[str], positions: list[int]
) -> None:
    valid = [good_line(f"valid fact number {n}", "2025-01-01T00:00:00+00:00", f"mvalid000000{n}") for n in range(3)]
    lines = list(noise)
    for position, line in zip(positions, valid, strict=True):
        lines.insert(min(position, len(lines)), line)
    paths = MemoryPaths(Path(tempfile.mkdtemp(dir=tmp_path)))
    paths.items_dir.mkdir(parents=True)
    paths.semantic_file.write_text("\n".join(lines) + "\n")

    parsed = parse_item_file(paths.semantic_file.read_text(), paths.semantic_file)  # never raises
    assert {f"mvalid000000{n}" for n in range(3)} <= {item.id for item in parsed.items}
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    assert all(store.get(f"mvalid000000{n}") is not None for n in range(3))

    kept_before = [line for line in lines if line.strip() and not _is_item(line)]
    store.remove(["mvalid0000001"])
    asyncio.run(store.flush())
    rewritten = paths.semantic_file.read_text().split("\n")
    assert [line for line in rewritten if line.strip() and not _is_item(line)] == kept_before
    assert not any("valid fact number 1" in line for line in rewritten)


def _is_item(line: str) -> bool:
    try:
        MemoryItem.model_validate_json(line, context={"zone": UTC})
    except ValueError:
        return False
    return True

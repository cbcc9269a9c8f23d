"""Hand-edited item files, continued: naive times in a zone other than UTC, and the rewrites that
`test_hand_edits.py` does not drive (supersede, relocate by promotion) keeping unreadable lines in place,
and `python -m bot status` counting them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.app import Application
from bot.domain.memory import MemoryItem, MemoryLayer
from bot.memory.item_files import parse_item_file
from bot.memory.items_store import MemoryItemStore
from bot.memory.maintenance import run_maintenance
from bot.memory.write_service import MemoryWriteService
from bot.settings import MemoryConfig
from bot.workspace import MemoryPaths
from tests.command_line import run_main
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import memory_section, say
from tests.test_cli import bot_env

TOKYO = ZoneInfo("Asia/Tokyo")
KEPT = [
    b"a note typed by hand, not JSON",
    b'{"id": "mbad00000010", "layer": "DREAMS", "type": "fact", "content": "unknown layer"}',
    b'{"id": "mbad00000011", "layer": "EPISODIC", "type": "fact", "content": "x", "createdAt": "soon"}',
]


def item_line(item_id: str, layer: str, content: str, created: str, **extra: object) -> bytes:
    record: dict[str, object] = {"id": item_id, "layer": layer, "type": "fact", "content": content}
    record.update(createdAt=created, updatedAt=created, confidence=0.9, salience=0.6, tags=[], references=[])
    record.update(source="telegram:1", **extra)
    return json.dumps(record).encode()


@pytest.fixture
async def tokyo_services(workspace_dir: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Application]:
    built = Application(env_for(workspace_dir, fake_openai, bot_timezone="Asia/Tokyo"))
    yield built
    await built.stop()


async def test_a_naive_time_is_read_in_the_bots_zone_and_decay_runs_over_it(
    tokyo_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    services = tokyo_services
    items = services.workspace.memory.items_dir
    items.mkdir(parents=True, exist_ok=True)
    old = (datetime.now(TOKYO) - timedelta(days=90)).replace(tzinfo=None, microsecond=0)
    (items / "semantic.jsonl").write_bytes(
        item_line("mnaive000010", "SEMANTIC", "My bicycle is a green Brompton.", "2025-03-02T10:00:00")
        + b"\n"
        + item_line("mnaive000011", "SEMANTIC", "My locker code is 4471.", old.isoformat())
        + b"\n"
    )

    await say(services, channel, "1", "which bicycle do I have?")
    assert "green Brompton" in (memory_section(fake_openai.system_prompts()[-1]) or "")

    scope = await services.memory.scope(MemoryConfig(), "test:1")
    async with services.memory.fresh(scope):
        loaded = scope.store.get("mnaive000010")
    assert loaded is not None
    assert loaded.created_at == datetime(2025, 3, 2, 10, 0, tzinfo=TOKYO)
    assert loaded.created_at.utcoffset() == timedelta(hours=9)

    # Decay compares the naive-in-the-file times with an aware now: no "offset-naive" error.
    report = await run_maintenance(services.memory, MemoryConfig(), datetime.now(UTC))
    assert report.decayed >= 1


async def test_supersede_and_relocate_keep_unreadable_lines_in_place(tmp_path: Path) -> None:
    paths = MemoryPaths(tmp_path / "memory")
    paths.items_dir.mkdir(parents=True)
    day = datetime(2025, 3, 2, 10, 0, tzinfo=UTC)
    semantic = [
        KEPT[0],
        item_line("msem00000001", "SEMANTIC", "My phone number ends in 42.", "2025-03-02T10:00:00"),
        KEPT[1],
    ]
    paths.semantic_file.write_bytes(b"\n".join(semantic) + b"\n")
    episodic_file = paths.episodic_file(day.date())
    episodic_file.parent.mkdir(parents=True, exist_ok=True)
    episodic = [
        item_line("mepi00000001", "EPISODIC", "We moved to Lisbon in May.", "2025-03-02T10:00:00"),
        KEPT[2],
        item_line("mepi00000002", "EPISODIC", "The cat is called Miso.", "2025-03-02T11:00:00"),
    ]
    episodic_file.write_bytes(b"\n".join(episodic) + b"\n")
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    assert store.skipped_lines == 3
    writer = MemoryWriteService(store)

    writer.update("msem00000001", "My phone number ends in 43.", day)  # supersede: a rewrite of the file
    writer.promote("mepi00000001", day)  # relocate: out of the day file, into semantic.jsonl
    await store.flush()

    semantic_after = paths.semantic_file.read_bytes().split(b"\n")
    assert semantic_after[0] == KEPT[0] and semantic_after[2] == KEPT[1], semantic_after
    assert b"ends in 43" in paths.semantic_file.read_bytes() and b"Lisbon" in paths.semantic_file.read_bytes()
    episodic_after = episodic_file.read_bytes().split(b"\n")
    assert episodic_after[0] == KEPT[2] and b"Miso" in episodic_after[1], episodic_after
    assert b"Lisbon" not in episodic_file.read_bytes()

    reread = MemoryItemStore(paths, UTC)
    reread.refresh_sync()
    assert reread.skipped_lines == 3


def test_python_m_bot_status_counts_the_skipped_lines(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    workspace = tmp_path / "workspace"
    env = bot_env(workspace, fake_openai)
    assert run_main(["chat"], env, stdin="I like green tea\n", cwd=tmp_path).returncode == 0
    semantic = workspace / "memory" / "items" / "semantic.jsonl"
    before = semantic.read_bytes() if semantic.exists() else b""
    semantic.write_bytes(before + KEPT[0] + b"\n" + KEPT[1] + b"\n")

    result = run_main(["status"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 unreadable item lines skipped (kept in their files)" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if "Skipped line" in line]
    assert len(warnings) == 2 and all(str(semantic) in line for line in warnings), result.stderr
    assert semantic.read_bytes().endswith(KEPT[0] + b"\n" + KEPT[1] + b"\n")  # status writes nothing


@pytest.mark.parametrize("created", ["0001-01-01T00:00:00", "9999-12-31T23:59:59+00:00"])
async def test_a_time_at_the_edge_of_the_calendar_is_an_unreadable_date_not_a_crash(
    tokyo_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, created: str
) -> None:
    """Year 1 read in Tokyo, or year 9999 shown in Tokyo, overflows when converted between zones."""
    services = tokyo_services
    items = services.workspace.memory.items_dir
    (items / "episodic").mkdir(parents=True, exist_ok=True)
    edge = item_line("medge0000001", "EPISODIC", "We met at the Brompton shop.", created)
    (items / "episodic" / "2025-03-02.jsonl").write_bytes(
        edge + b"\n" + item_line("mgood0000010", "EPISODIC", "The Brompton is green.", "2025-03-02T10:00:00") + b"\n"
    )
    await say(services, channel, "1", "what colour is the Brompton?")
    assert "The Brompton is green." in (memory_section(fake_openai.system_prompts()[-1]) or "")
    assert "1 unreadable item lines skipped" in await say(services, channel, "1", "/status")
    await run_maintenance(services.memory, MemoryConfig(), datetime.now(UTC))
    assert (items / "episodic" / "2025-03-02.jsonl").read_bytes().startswith(edge + b"\n")


OFFSETS = st.none() | st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))


@settings(max_examples=200, deadline=None)
@given(created=st.datetimes(timezones=OFFSETS), updated=st.datetimes(timezones=OFFSETS))
def test_any_written_time_is_either_skipped_or_usable_in_every_zone(created: datetime, updated: datetime) -> None:
    line = item_line("mtime0000001", "EPISODIC", "a fact", created.isoformat())
    record = json.loads(line)
    record["updatedAt"] = updated.isoformat()
    parsed = parse_item_file(json.dumps(record) + "\n", Path("episodic/x.jsonl"), TOKYO)  # never raises
    assert len(parsed.items) + parsed.skipped == 1
    for item in parsed.items:
        for moment in (item.created_at, item.updated_at):
            assert moment.tzinfo is not None
            for zone in (UTC, TOKYO, ZoneInfo("Pacific/Kiritimati"), ZoneInfo("Pacific/Pago_Pago")):
                moment.astimezone(zone)  # what the day files and the pack's dates do
            assert datetime.now(UTC) - moment is not None  # what recency and decay do


@pytest.mark.parametrize("last", ["item", "kept"])
async def test_a_last_line_saved_without_a_newline_survives_the_next_append(tmp_path: Path, last: str) -> None:
    """Editors that save without a final newline leave a whole last line, not a torn one: an append
    must end it, not cut it off as it cuts the tail of an append a crash interrupted."""
    paths = MemoryPaths(tmp_path / "memory")
    paths.items_dir.mkdir(parents=True)
    first = item_line("mhand0000001", "SEMANTIC", "My bike is green.", "2025-03-02T10:00:00")
    car = item_line("mhand0000002", "SEMANTIC", "My car is red.", "2025-03-02T10:00:00")
    final = car if last == "item" else KEPT[1]
    paths.semantic_file.write_bytes(first + b"\n" + final)  # no newline at the end
    store = MemoryItemStore(paths, UTC)
    store.refresh_sync()
    store.append([MemoryItem(layer=MemoryLayer.SEMANTIC, type="fact", content="My boat is blue.", source="t:1")])
    await store.flush()

    lines = paths.semantic_file.read_bytes().split(b"\n")
    assert len(lines) == 4 and lines[3] == b"", lines  # three whole lines, each ended
    assert b"My bike is green." in lines[0] and b"My boat is blue." in lines[2]
    assert lines[1] == KEPT[1] if last == "kept" else b"My car is red." in lines[1]
    reread = MemoryItemStore(paths, UTC)
    reread.refresh_sync()
    assert reread.get("mhand0000001") is not None and reread.skipped_lines == (last == "kept")
    assert last == "kept" or reread.get("mhand0000002") is not None

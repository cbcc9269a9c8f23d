"""The offline embedder, the vector cache on disk, and what hybrid retrieval puts in the prompt.

Every test drives the real bot (the `Application`, the fake model on 127.0.0.1) with the default
configuration: `memory.embeddingsModel` is `"local"`, the bundled multilingual-e5-small.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from bot.app import Application
from bot.clock import Clock
from bot.context.budget import MEMORY, ContextBudget
from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryLayer, MemoryQuery
from bot.llm.client import LlmClient
from bot.llm.local_embeddings import LocalEmbedder
from bot.memory.embeddings import text_key, unit
from bot.memory.scopes import MemoryScope
from bot.memory.service import MemoryService
from bot.memory.temporal import time_window
from bot.memory.vector_cache import CACHE_FILE_NAME
from bot.memory.vector_index import VectorIndex
from bot.settings import MemoryConfig
from bot.workspace import Workspace
from tests.compaction.helpers import SMALL_MODEL, small_model_workspace
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import item, memory_section, say, write_items

NOW = datetime.now(UTC)
TOPICS = [
    "the quarterly tax forms", "a broken bicycle chain", "the new kitchen tiles", "chess openings",
    "the train timetable to Lyon", "tomato seedlings on the balcony", "a jazz concert downtown",
    "the printer running out of ink", "learning the Spanish subjunctive", "the car insurance renewal",
    "a leaking bathroom tap", "the marathon training plan", "sourdough starter feeding", "the office wifi",
]  # fmt: skip


def distractors(count: int) -> list[str]:
    return [f"We talked about {TOPICS[n % len(TOPICS)]}, part {n}, and made a plan for it." for n in range(count)]


async def wait_for_vectors(services: Application, session_id: str = "test:1", timeout: float = 60.0) -> None:
    """Until every active item of the chat's scope has a vector (embedding runs in the background)."""
    config = (await services.config_store.current()).memory
    scope = await services.memory.scope(config, session_id)
    services.memory.index_vectors(scope, config)
    async with asyncio.timeout(timeout):
        await services.memory.settle()
    done, total = scope.vectors.coverage
    assert done == total


def seed(services: Application, contents: list[str], day: datetime = NOW - timedelta(days=40)) -> None:
    items = [item(MemoryLayer.EPISODIC, content, day, type_="dialog_turn") for content in contents]
    write_items(services.workspace.memory.episodic_dir / f"{day.date().isoformat()}.jsonl", items)


async def test_the_local_embedder_runs_offline_and_puts_paraphrases_close() -> None:
    embedder = LocalEmbedder()
    passages = np.asarray(await embedder.embed(["We adopted a golden retriever puppy.", "My tax return is late."]))
    query = np.asarray(await embedder.embed_query("Which dog did we get?"))
    assert passages.shape == (2, 384)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-3
    assert float(passages[0] @ query) > float(passages[1] @ query)


async def test_the_local_embedder_reads_a_long_text_up_to_the_models_window() -> None:
    """e5 reads at most 512 tokens: past them a message is left out (the engine would take seconds on it,
    and a long message would hold the reply that long), so what comes after does not change the vector."""
    embedder = LocalEmbedder()
    head = "My passport is in the blue folder in the second drawer of the desk. "
    longer, longest = head + "filler words " * 600, head + "filler words " * 1200
    assert np.allclose(await embedder.embed_query(longer), await embedder.embed_query(longest))
    longer_vector, longest_vector = await embedder.embed([longer, longest])
    assert np.allclose(longer_vector, longest_vector)
    assert not np.allclose(await embedder.embed_query(head), await embedder.embed_query(longer))


async def test_a_paraphrase_with_no_word_in_common_reaches_the_prompt(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    seed(services, [*distractors(150), "User: We adopted a golden retriever puppy called Biscuit."])
    await wait_for_vectors(services)
    await say(services, channel, "1", "what was the name of my dog?")
    memory = memory_section(fake_openai.system_prompts()[-1]) or ""
    assert "golden retriever puppy called Biscuit" in memory
    await wait_for_vectors(services)  # the new exchange's item too, in the background
    status = await say(services, channel, "1", "/status")
    assert re.search(r"vectors (\d+)/\1 \(local multilingual-e5-small-q4\)", status), status
    assert "(hybrid," in status


async def test_vectors_are_kept_on_disk_and_a_restart_embeds_nothing(
    workspace_dir: Path, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    first = Application(env_for(workspace_dir, fake_openai))
    seed(first, distractors(40))
    with caplog.at_level(logging.INFO):
        await wait_for_vectors(first)
    await first.stop()
    assert (first.workspace.memory.index_dir / CACHE_FILE_NAME).is_file()
    assert any("Embedded 40 items" in record.getMessage() for record in caplog.records)
    caplog.clear()

    again = Application(env_for(workspace_dir, fake_openai))
    try:
        with caplog.at_level(logging.INFO):
            await wait_for_vectors(again)
        messages = [record.getMessage() for record in caplog.records]
        assert any("40 item vectors read from" in message for message in messages)
        assert not any("Embedded" in message for message in messages)
        # A hand edit: one line changed, one added. Only those two are embedded.
        day_file = next(again.workspace.memory.episodic_dir.glob("*.jsonl"))
        lines = day_file.read_text().splitlines()
        changed = json.loads(lines[0])
        changed["content"] = "We talked about moving to Lisbon next spring."
        lines[0] = json.dumps(changed)
        day_file.write_text("\n".join(lines) + "\n")
        seed(again, ["We talked about adopting a cat."])
        caplog.clear()
        with caplog.at_level(logging.INFO):
            async with again.memory.fresh(await again.memory.scope(MemoryConfig(), "test:1")):
                pass
            await wait_for_vectors(again)
        assert any("Embedded 2 items" in record.getMessage() for record in caplog.records)
    finally:
        await again.stop()


async def test_a_corrupt_vector_cache_is_moved_aside_and_rebuilt(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    cache = services.workspace.memory.index_dir / CACHE_FILE_NAME
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"this is not a database" * 100)
    seed(services, ["User: The spare key is under the blue flower pot."])
    with caplog.at_level(logging.WARNING):
        await wait_for_vectors(services)
    assert any("Vector cache" in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)
    assert list(cache.parent.glob(f"{CACHE_FILE_NAME}.corrupt-*"))
    await say(services, channel, "1", "where is the spare key?")
    assert "blue flower pot" in (memory_section(fake_openai.system_prompts()[-1]) or "")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fail the test on any connection or name lookup that leaves this machine."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def is_local(host: Any) -> bool:
        if not isinstance(host, str) or host in ("localhost", ""):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not is_local(address[0]):
            attempts.append(address)
            raise OSError(f"test forbids a connection to {address}")
        return real_connect(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local(host):
            attempts.append(host)
            raise OSError(f"test forbids looking up {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    yield attempts
    assert attempts == [], f"outbound network access: {attempts}"


async def test_the_embedder_needs_no_network_at_start_or_query(
    no_network: list[Any], services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    seed(services, ["User: My sister Clara lives in Porto."])
    await wait_for_vectors(services)
    await say(services, channel, "1", "where does my sibling live?")
    assert "Clara lives in Porto" in (memory_section(fake_openai.system_prompts()[-1]) or "")
    assert no_network == []


async def test_on_a_4k_model_the_pack_fits_the_memory_share_left_after_a_long_memory_md(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    small_model_workspace(workspace_dir)
    config_file = workspace_dir / "preferences" / "runtime-config.json"
    config_file.write_text(json.dumps({"llm": {"model": SMALL_MODEL}, "rag": {"enabled": False}}))
    services = Application(env_for(workspace_dir, fake_openai))
    try:
        services.workspace.memory.long_term_file.parent.mkdir(parents=True, exist_ok=True)
        services.workspace.memory.long_term_file.write_text("# Notes\n" + "- I prefer short answers.\n" * 60)
        seed(services, [f"User: fact number {n} about the garden shed and its door." for n in range(60)])
        await wait_for_vectors(services)
        await say(services, channel, "1", "what about the garden shed door?")
        memory = memory_section(fake_openai.system_prompts()[-1]) or ""
        config = await services.config_store.current()
        share = ContextBudget.for_model(services.models.lookup(SMALL_MODEL), config.compaction).cap(MEMORY)
        assert "## Long-term Memory" in memory and "garden shed" in memory  # MEMORY.md and scored items both
        assert "MEMORY.md goes on for" in memory  # MEMORY.md over its share, visibly
        assert "cut here: it exceeded its share" not in memory  # chosen to fit, not cut afterwards
        # Each system message's `# Memory` part (the time line of the message's own part is not memory).
        systems = [m["content"] for m in fake_openai.chat_requests()[-1]["messages"] if m["role"] == "system"]
        assert sum(TokenEstimator().text(memory_section(text) or "") for text in systems) <= share
        status = await say(services, channel, "1", "/status")
        assert "over budget" in status
    finally:
        await services.stop()


async def test_the_pack_is_counted_in_the_tokens_the_chat_model_really_uses(workspace_dir: Path) -> None:
    """Once the provider's reported usage has taught the estimator that the chat model takes about
    4.5 characters a token, the same budget holds more memory, and the section, measured as the
    prompt plan measures it (in that model's tokens), still fits the share."""
    estimator = TokenEstimator()
    for _ in range(40):
        estimator.calibrate("chat-model", sent_chars=9_000, prompt_tokens=2_000)
    assert estimator.ratio_for("chat-model") > 4.4
    service = MemoryService(Workspace(workspace_dir), Clock(UTC), cast(LlmClient, None), estimator, None)
    paths = service.paths_for(MemoryConfig(), "test:1")
    day = NOW - timedelta(days=40)
    write_items(
        paths.episodic_file(day.date()),
        [item(MemoryLayer.EPISODIC, text, day, type_="dialog_turn") for text in distractors(400)],
    )
    config = MemoryConfig(embeddings_model=None)
    question = "what did we plan for the kitchen tiles, the tax forms and the train to Lyon?"
    share = 1500
    try:
        default = await service.build_prompt(config, "test:1", question, share_tokens=share)
        calibrated = await service.build_prompt(config, "test:1", question, share_tokens=share, model="chat-model")
    finally:
        await service.close()
    assert len(calibrated.text) > 1.2 * len(default.text)
    assert estimator.text(calibrated.text, "chat-model") <= share
    assert estimator.text(default.text) <= share


def test_time_cues_become_a_window_of_dates() -> None:
    now = datetime(2026, 6, 17, 12, 0, tzinfo=UTC)  # a Wednesday
    assert time_window("what did I do yesterday?", now) == (now.date() - timedelta(days=1),) * 2
    last_may = time_window("what did we talk about last May", now)
    assert last_may is not None and (last_may[0].isoformat(), last_may[1].isoformat()) == ("2026-05-01", "2026-05-31")
    in_2024 = time_window("where did I travel in 2024?", now)
    assert in_2024 is not None and in_2024[0].year == 2024
    assert time_window("you may be right", now) is None  # "may" alone is a verb
    assert time_window("how are you", now) is None


async def test_an_item_from_the_time_a_message_names_is_favoured(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await services.config_store.current()
    may = datetime(NOW.year - 1, 5, 14, 10, 0, tzinfo=UTC)
    seed(services, ["User: We went hiking in the hills."], day=may)
    seed(services, ["User: We went hiking in the hills again."], day=may + timedelta(days=60))
    await wait_for_vectors(services)
    memory_service: MemoryService = services.memory
    config = MemoryConfig()
    scope = await memory_service.scope(config, "test:1")
    query = MemoryQuery(text="where did we go hiking last May", session_id="test:1", now=NOW)
    async with memory_service.fresh(scope):
        contents = ranked_contents(scope, query)
    assert contents.index("User: We went hiking in the hills.") < contents.index(
        "User: We went hiking in the hills again."
    )


def ranked_contents(scope: MemoryScope, query: MemoryQuery) -> list[str]:
    """The contents of the candidates retrieval ranks for `query`, best first."""
    ranked = scope.retrieval.retrieve(query).ranked
    items = scope.store.get_many(entry.item_id for entry in ranked)
    return [items[entry.item_id].content for entry in ranked if entry.item_id in items]


async def test_a_message_naming_someone_favours_what_that_person_said(services: Application) -> None:
    seed(services, ["Ann: I went climbing at the old quarry.", "Bob: I went climbing at the old quarry."])
    await wait_for_vectors(services)
    scope = await services.memory.scope(MemoryConfig(), "test:1")
    query = MemoryQuery(text="Where did Bob go climbing?", session_id="test:1", now=NOW)
    async with services.memory.fresh(scope):
        ranked = ranked_contents(scope, query)
    assert ranked.index("Bob: I went climbing at the old quarry.") < ranked.index(
        "Ann: I went climbing at the old quarry."
    )


def test_the_vector_index_follows_edits_and_drops_stale_rows() -> None:
    index = VectorIndex()
    index.use_embedder("test")
    generator = np.random.default_rng(1)
    for round_ in range(6):  # every item's text changes each round: the old rows go stale
        items = [item(MemoryLayer.EPISODIC, f"item {n} version {round_}", NOW, item_id=f"i{n}") for n in range(400)]
        index.add_many(items)
        vectors = {key: unit(generator.standard_normal(16)) for key, _ in index.pending()}
        index.put(vectors)
        assert index.coverage == (400, 400)
    target = item(MemoryLayer.EPISODIC, "item 7 version 5", NOW, item_id="i7")
    query = next(vector for key, vector in vectors.items() if key == text_key(target.content))
    assert next(iter(index.relevance(query, 5))) == "i7"
    assert index.rows < 6 * 400  # stale rows were compacted away (at most 1,024 of them plus a batch)
    index.remove("i7")
    assert "i7" not in index.relevance(query, 5)


async def test_the_active_skill_brings_its_procedures_forward(services: Application) -> None:
    procedures = [
        item(MemoryLayer.PROCEDURAL, "Rebase with git pull --rebase before pushing.", NOW, tags=["git"]),
        item(MemoryLayer.PROCEDURAL, "Water the tomatoes every second evening.", NOW, tags=["garden"]),
    ]
    write_items(services.workspace.memory.procedural_file, procedures)
    scope = await services.memory.scope(MemoryConfig(), "test:1")
    query = MemoryQuery(text="help me with this", session_id="test:1", now=NOW, active_skill="git")
    async with services.memory.fresh(scope):
        ranked = ranked_contents(scope, query)
    assert ranked[0] == "Rebase with git pull --rebase before pushing."
    assert "Water the tomatoes every second evening." not in ranked  # no word, no vector, no skill: not a candidate


def test_above_the_exact_search_size_the_short_list_finds_the_same_items_with_the_same_scores() -> None:
    # One person's memory of 24,000 texts (more than EXACT_SEARCH_MAX_ROWS): vectors that share a common
    # direction, as the e5 model's do, and ten that are near the question.
    generator = np.random.default_rng(7)
    count, dimensions = 24_000, 64
    common = unit(generator.standard_normal(dimensions))
    question = unit(generator.standard_normal(dimensions))
    vectors = generator.standard_normal((count, dimensions)) * 0.3 + common
    vectors[:10] = question + generator.standard_normal((10, dimensions)) * 0.2
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    items = [item(MemoryLayer.EPISODIC, f"text {n}", NOW, item_id=f"i{n}") for n in range(count)]
    index = VectorIndex()
    index.use_embedder("test")
    index.add_many(items)
    index.put({text_key(entry.content): vectors[n] for n, entry in enumerate(items)})

    found = index.relevance(question, 5)

    # What the exact pass over every row gives: how far each cosine stands above the mean, against the best.
    cosines = vectors @ question
    above = cosines - cosines.mean()
    best = np.argsort(-above)[:5]
    assert list(found) == [f"i{row}" for row in best]
    assert np.allclose(list(found.values()), above[best] / above[best[0]], atol=0.01)


def test_vectors_stored_again_for_the_same_texts_replace_the_old_ones_in_the_mean() -> None:
    generator = np.random.default_rng(3)
    items = [item(MemoryLayer.EPISODIC, f"text {n}", NOW, item_id=f"i{n}") for n in range(200)]
    index = VectorIndex()
    index.use_embedder("test")
    index.add_many(items)
    keys = [text_key(entry.content) for entry in items]
    shared = unit(generator.standard_normal(32))
    index.put({key: unit(generator.standard_normal(32) * 0.2 + shared) for key in keys})
    index.relevance(shared, 5)  # the mean is kept up to date by each write from now on
    vectors = np.stack([unit(generator.standard_normal(32)) for _ in keys])
    index.put(dict(zip(keys, vectors, strict=True)))
    question = unit(generator.standard_normal(32) + shared)

    found = index.relevance(question, 5)

    above = vectors @ question - (vectors @ question).mean()
    best = np.argsort(-above)[:5]
    assert list(found) == [f"i{row}" for row in best]
    assert np.allclose(list(found.values()), above[best] / above[best[0]], atol=0.01)


def test_a_dense_search_after_each_kind_of_change_finds_the_items_that_hold_the_text_now() -> None:
    generator = np.random.default_rng(11)
    vector_of: dict[str, Any] = {}
    index = VectorIndex()
    index.use_embedder("test")

    def indexed(entries: list[Any]) -> None:
        index.add_many(entries)
        for key, _ in index.pending():
            vector_of.setdefault(key, unit(generator.standard_normal(24)))
        index.put({key: vector_of[key] for key, _ in index.pending()})

    def texts(count: int, version: int = 0) -> list[Any]:
        return [item(MemoryLayer.EPISODIC, f"text {n} v{version}", NOW, item_id=f"i{n}") for n in range(count)]

    def finds_its_holders(active: list[Any], gone: tuple[str, ...] = ()) -> None:
        """Asked with a text's own vector, the search finds first the items that hold that text now, in the
        order they were added, and never an item forgotten or moved to another text."""
        holders: dict[str, list[str]] = {}
        for entry in active:
            holders.setdefault(text_key(entry.content), []).append(entry.id)
        for key, ids in list(holders.items())[::37] + [
            (text_key(entry.content), holders[text_key(entry.content)]) for entry in active[-3:]
        ]:
            found = list(index.relevance(vector_of[key], 5))
            assert found[: len(ids)] == ids
            assert not set(found) & set(gone)

    entries = texts(1_500)
    indexed(entries)
    finds_its_holders(entries)
    index.remove("i3")  # forgotten: its text (its row) held by nobody
    finds_its_holders(entries[:3] + entries[4:], gone=("i3",))
    again = item(MemoryLayer.EPISODIC, "text 3 v0", NOW, item_id="j3")  # the text written again by another item
    indexed([again])
    finds_its_holders(entries[:3] + entries[4:] + [again], gone=("i3",))
    twin = item(MemoryLayer.EPISODIC, "text 5 v0", NOW, item_id="j5")  # two items, one text, one row
    indexed([twin])
    finds_its_holders(entries[:3] + entries[4:] + [again, twin], gone=("i3",))
    index.remove("i5")
    finds_its_holders(entries[:3] + entries[4:5] + entries[6:] + [again, twin], gone=("i3", "i5"))
    # Every text edited twice (the old rows go stale, then are compacted away), then everything dropped and the
    # first edit's texts added again (their rows written anew).
    edited = texts(1_500, version=1)
    indexed(edited)
    latest = texts(1_500, version=2)
    indexed(latest)
    finds_its_holders([*latest, again, twin])
    index.clear()
    assert index.relevance(vector_of[text_key(latest[0].content)], 5) == {}
    indexed(edited)
    finds_its_holders(edited, gone=("j3", "j5"))

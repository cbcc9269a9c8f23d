"""Forgetting removes a conversation from LightRAG and from the queue file; `memory.scope: chat` keeps chats apart."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, rag_of, say
from tests.waiting import wait_until


async def test_forgetting_a_memory_deletes_the_documents_that_carry_it(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, memory={"enabled": False})
    rag = rag_of(services)
    try:
        await say(services, channel, "1", "My bank PIN hint is the Zephyr painting in the hallway.")
        await say(services, channel, "1", "The Orion project deadline is the 30th of June.")

        async def two_queued() -> bool:
            return (await rag.store.counts())["queued"] == 2

        await wait_until(two_queued)
        assert await rag.flush() == 2
        session = await services.sessions.get("test:1")
        assert session is not None
        secret_message = next(m for m in session.messages if "Zephyr" in m.content)

        # What the memory tools do when the user forgets something: find the documents, delete them.
        doc_ids = await rag.documents_for_messages([secret_message.id])
        assert len(doc_ids) == 1
        assert await rag.forget_documents(doc_ids) == doc_ids

        await say(services, channel, "1", "/new")  # out of the live session: only the graph has them now
        await say(services, channel, "1", "What was the painting in the hallway?")
        system = fake_openai.system_prompts()[-1] or ""
        assert "Zephyr" not in system and "Orion project deadline" in system
        on_disk = "".join(p.read_text(errors="replace") for p in (workspace_dir / "rag").rglob("*") if p.is_file())
        assert "Zephyr" not in on_disk and "Orion" in on_disk
        assert (await rag.status()).indexed == 1
    finally:
        await services.stop()
        await rag.close()


async def test_a_queued_document_is_forgotten_before_it_is_indexed(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai)
    rag = rag_of(services)
    try:
        await say(services, channel, "1", "Please note that my locker code is Quartz seven seven.")

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert len(await rag.forget_documents(await rag.documents_for_session("test:1"))) == 1
        assert await rag.flush() == 0
        assert "Quartz" not in (workspace_dir / "rag" / "documents.jsonl").read_text()
    finally:
        await services.stop()
        await rag.close()


async def test_with_chat_scope_nothing_crosses_between_chats(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    services = build_rag_bot(workspace_dir, fake_openai, memory={"enabled": False, "scope": "chat"})
    rag = rag_of(services)
    try:
        await say(services, channel, "1", "My sister Marta moved to Lisbon last week.")

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert await rag.flush() == 1

        await say(services, channel, "2", "Where does Marta live?")
        assert "# Relevant Memory" not in (fake_openai.system_prompts()[-1] or "")
        await say(services, channel, "1", "/new")  # the live session would show the fact already
        await say(services, channel, "1", "Where does Marta live?")
        assert "Marta moved to Lisbon" in (fake_openai.system_prompts()[-1] or "").split("# Relevant Memory")[1]

        assert (workspace_dir / "rag" / "chat_test_1" / "kv_store_full_docs.json").is_file()
        assert not (workspace_dir / "rag" / "global").exists()
    finally:
        await services.stop()
        await rag.close()

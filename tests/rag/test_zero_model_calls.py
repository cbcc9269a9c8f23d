"""Reading the knowledge graph asks no model: local keywords, the bundled embedder, one chat call a turn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bot.app import shutdown
from bot.rag.keywords import content_words
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import build_rag_bot, rag_of, say, wait_until

FACT = "My sister Marta moved to Lisbon last week, she works at the Gulbenkian museum now."


async def test_a_fact_only_in_the_graph_comes_back_with_one_chat_call_and_no_embeddings_call(
    workspace_dir: Path, fake_openai: FakeOpenAI, channel: RecordingChannel
) -> None:
    # The shipped defaults for retrieval: hybrid mode, the bundled embedder.
    services = build_rag_bot(workspace_dir, fake_openai, {"queryMode": "hybrid", "cosineThreshold": 0.2})
    try:
        await say(services, channel, "1", FACT)
        rag = rag_of(services)

        async def queued() -> bool:
            return (await rag.store.counts())["queued"] == 1

        await wait_until(queued)
        assert await rag.flush() == 1  # extraction asks the model: off the reply path
        pinned = json.loads((services.workspace.rag_dir / "embedder.json").read_text())
        assert pinned == {"model": "local", "dimensions": 384}

        # A new session, and nothing of it left in the other memory layers.
        await say(services, channel, "1", "/new")
        await services.memory.settle()
        shutil.rmtree(services.workspace.memory_dir / "items")
        for note in services.workspace.memory_dir.glob("*.md"):
            note.unlink()

        requests_before = len(fake_openai.requests)
        await say(services, channel, "1", "Where does Marta work these days?")
        during = fake_openai.requests[requests_before:]
        assert [r.path for r in during] == ["/v1/chat/completions"]  # the answer, and nothing else
        system = fake_openai.system_prompts()[-1] or ""
        assert "# Relevant Memory" in system
        relevant = system.split("# Relevant Memory", 1)[1]
        assert "Marta" in relevant and "Gulbenkian" in relevant
    finally:
        await shutdown(services, [])
        await rag_of(services).close()


def test_a_greeting_is_not_looked_up_and_a_question_is() -> None:
    assert content_words("hi! how are you?") == []
    assert content_words("Where does my sister Marta work these days?") == ["sister", "Marta", "work", "days"]

"""Shared pieces of the RAG tests: a fake model that answers LightRAG's prompts, and a bot wired with RAG."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.pipeline.systems.rag_indexing import RagIndexingSystem
from bot.rag.service import RagService
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_responder, message_text
from tests.fakes.recording_channel import RecordingChannel

# Small, fast settings: the fake's 64-dimension vectors, every exchange indexed, naive retrieval.
FAST_RAG = {
    "embeddingDimensions": 64,
    "minExchangeChars": 20,
    "queryMode": "naive",
    "cosineThreshold": -1.0,  # the fake's 64-dimension hash vectors are too noisy for a threshold
    "retryBackoffSeconds": 0.0,
}
_PROPER_NOUN = re.compile(r"\b[A-Z][a-z]{2,}\b")
_ENTITY_LIMIT = re.compile(r"at most (\d+) entity rows")
_STOP = {"User", "Assistant", "Conversation", "The", "What", "Who", "Where", "When", "How", "Please", "Yes"}


def names_in(text: str) -> list[str]:
    return list(dict.fromkeys(n for n in _PROPER_NOUN.findall(text) if n not in _STOP))


def lightrag_responder(request: dict[str, Any]) -> Reply:
    """Answers LightRAG's extraction and keyword prompts as a real model would; the echo otherwise.

    Entities are the capitalised words of the input text, each related to the next one, as many as the
    prompt allows ("at most N entity rows").
    """
    messages = request.get("messages", [])
    prompt = message_text(messages[-1].get("content")) if messages else ""
    system = " ".join(message_text(m.get("content")) for m in messages if m.get("role") == "system")
    if "keyword extractor" in prompt or "keyword extractor" in system:
        query = prompt.rsplit("Query:", 1)[-1] if "Query:" in prompt else prompt[-300:]
        return Reply(text=json.dumps({"high_level_keywords": ["conversation"], "low_level_keywords": names_in(query)}))
    if "Knowledge Graph Specialist" in system or "---Input Text---" in prompt:
        if "---Input Text---" not in prompt:  # asked to continue (gleaning): everything was found at once
            return Reply(text="<|COMPLETE|>")
        # The input text, without the prompt's closing `---Output---` section.
        text = prompt.rsplit("---Input Text---", 1)[-1].split("---Output---", 1)[0]
        limit = _ENTITY_LIMIT.search(prompt)
        names = names_in(text)[: int(limit.group(1)) if limit else 6]
        rows = [
            f"entity<|#|>{name}<|#|>concept<|#|>{name} was mentioned: {sentence_with(text, name)}" for name in names
        ]
        rows += [
            f"relation<|#|>{a}<|#|>{b}<|#|>mentioned together<|#|>{a} and {b} came up together"
            for a, b in itertools.pairwise(names)
        ]
        return Reply(text="\n".join([*rows, "<|COMPLETE|>"]))
    if "---Role---" in prompt or "---Role---" in system:
        return Reply(text="A summary of the descriptions.")
    return echo_responder(request)


def sentence_with(text: str, name: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+|\n", text):
        if name in sentence:
            return " ".join(sentence.split())[:160]
    return name


def write_runtime_config(workspace: Path, rag: dict[str, Any] | None = None, **sections: Any) -> None:
    config = {"rag": {**FAST_RAG, **(rag or {})}, **sections}
    path = workspace / "preferences" / "runtime-config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config), encoding="utf-8")


def build_rag_bot(
    workspace: Path, fake_openai: FakeOpenAI, rag: dict[str, Any] | None = None, **sections: Any
) -> Application:
    write_runtime_config(workspace, rag, **sections)
    fake_openai.set_responder(lightrag_responder)
    return Application(env_for(workspace, fake_openai))


def rag_of(services: Application) -> RagService:
    for system in services.runner.systems:
        if isinstance(system, RagIndexingSystem):
            return system.rag
    raise LookupError("RagIndexingSystem is not wired")


async def say(services: Application, channel: RecordingChannel, chat_id: str, text: str) -> str:
    """Send a message as the user and return the bot's reply."""
    before = len(channel.sent[chat_id])
    await services.router.accept(channel.message(chat_id, text), channel)
    return (await channel.wait_for(chat_id, before + 1))[-1]


async def queued_count(services: Application) -> int:
    return (await rag_of(services).store.counts())["queued"]

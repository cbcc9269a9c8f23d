"""Shared pieces of the compaction tests: a bot on a small model, and a fake summarizer that keeps facts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.compaction.service import CompactionService
from bot.pipeline.systems.auto_compaction import AutoCompactionSystem
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, message_text
from tests.fakes.recording_channel import RecordingChannel

SMALL_MODEL = "tiny-4k"
SMALL_INPUT_TOKENS = 4000
SMALL_OUTPUT_TOKENS = 500
# Facts the tests state; the fake summarizer keeps every one it sees, like a good summary would.
FACT = re.compile(r"FACT-\d+ [a-z ]+? is [A-Z0-9-]+")
SUMMARY_PROMPTS = ("You are a conversation summarizer", "You are updating a conversation summary")


def small_model_workspace(workspace: Path, **compaction: Any) -> None:
    """A workspace whose chat model has a 4,000-token window (models.json in preferences)."""
    preferences = workspace / "preferences"
    preferences.mkdir(parents=True, exist_ok=True)
    models = {
        "models": {
            SMALL_MODEL: {
                "maxInputTokens": SMALL_INPUT_TOKENS,
                "maxOutputTokens": SMALL_OUTPUT_TOKENS,
                "tier": "balanced",
            }
        }
    }
    (preferences / "models.json").write_text(json.dumps(models))
    # Memory and RAG are off: these tests are about the conversation's own share of the window.
    config: dict[str, Any] = {"llm": {"model": SMALL_MODEL}, "memory": {"enabled": False}, "rag": {"enabled": False}}
    if compaction:
        config["compaction"] = compaction
    (preferences / "runtime-config.json").write_text(json.dumps(config))


def build_small(workspace: Path, fake_openai: FakeOpenAI, **compaction: Any) -> Application:
    small_model_workspace(workspace, **compaction)
    return Application(env_for(workspace, fake_openai))


def compaction_of(services: Application) -> CompactionService:
    for system in services.runner.systems:
        if isinstance(system, AutoCompactionSystem):
            return system.compaction
    raise LookupError("AutoCompactionSystem is not wired")


def is_summary_request(request: dict[str, Any]) -> bool:
    messages = request.get("messages", [])
    return bool(messages) and str(messages[0].get("content", "")).startswith(SUMMARY_PROMPTS)


def request_text(request: dict[str, Any]) -> str:
    return "\n".join(message_text(m.get("content")) for m in request.get("messages", []))


def provider_tokens(request: dict[str, Any]) -> int:
    """What a provider would count for the request: ~4 characters a token, tool schemas included."""
    chars = sum(len(message_text(m.get("content"))) for m in request.get("messages", []))
    for message in request.get("messages", []):
        for call in message.get("tool_calls") or []:
            chars += len(json.dumps(call))
    if request.get("tools"):
        chars += len(json.dumps(request["tools"]))
    return chars // 4


def structured_summary(facts: list[str], note: str = "") -> str:
    """A summary in the checkpoint format listing `facts` under Critical Context."""
    critical = "\n".join(f"- {fact}" for fact in facts) or "- nothing yet"
    return (
        "## Goal\nThe user chats with the assistant and states facts to remember.\n\n"
        "## Constraints & Preferences\n- Short answers.\n\n"
        "## Progress\n### Done\n- [x] Facts noted.\n\n"
        f"## Key Decisions\n- **Keep facts**: the user asked to remember them.{note}\n\n"
        "## Conversation Dynamics\n- Friendly.\n\n"
        "## Next Steps\n1. Continue.\n\n"
        f"## Critical Context\n{critical}\n"
    )


def fact_keeping_summary(request: dict[str, Any]) -> Reply:
    """The fake summarizer: a structured summary with every FACT it sees (old summary and new messages)."""
    facts = sorted(set(FACT.findall(request_text(request))))
    return Reply(text=structured_summary(facts))


class LimitedModel:
    """A fake model with a context limit: refuses a request over it, summarizes, or answers with padding."""

    def __init__(
        self,
        limit_tokens: int = SMALL_INPUT_TOKENS - SMALL_OUTPUT_TOKENS,
        summarize: Callable[[dict[str, Any]], Reply | Fault | str] = fact_keeping_summary,
        answer_chars: int = 160,
    ) -> None:
        self.limit_tokens = limit_tokens
        self.summarize = summarize
        self.answer_chars = answer_chars
        self.largest_request = 0
        self.over_limit: list[int] = []
        self.summary_requests = 0

    def __call__(self, request: dict[str, Any]) -> Reply | Fault | str:
        tokens = provider_tokens(request)
        self.largest_request = max(self.largest_request, tokens)
        if tokens > self.limit_tokens:
            self.over_limit.append(tokens)
            return Fault.context_length_exceeded(self.limit_tokens, tokens)
        if is_summary_request(request):
            self.summary_requests += 1
            return self.summarize(request)
        last = message_text(request["messages"][-1].get("content"))
        return Reply(text=("Noted: " + last[:12] + " ").ljust(self.answer_chars, "."))


async def say(services: Application, channel: RecordingChannel, chat_id: str, text: str) -> str:
    before = len(channel.sent[chat_id])
    await services.router.accept(channel.message(chat_id, text), channel)
    return (await channel.wait_for(chat_id, before + 1))[-1]

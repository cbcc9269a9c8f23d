"""Idle chats are compacted in the background, never while they are in use."""

from __future__ import annotations

import json
from datetime import timedelta

from bot.app import Application
from bot.domain.message import Message
from bot.domain.model import utc_now
from bot.scheduler.idle_compaction import IdleCompactor
from tests.fakes.openai_server import FakeOpenAI

SUMMARY = (
    "## Goal\nPlan the trip.\n## Constraints & Preferences\nNone.\n## Progress\nTalked a lot.\n"
    "## Key Decisions\nNone.\n## Conversation Dynamics\nFriendly.\n## Next Steps\nBook.\n"
    "## Critical Context\nThe user is Ann."
)


async def fill(services: Application, chat_id: str, turns: int) -> None:
    session = await services.sessions.get_or_create("test", chat_id)
    for turn in range(turns):
        await services.sessions.append_messages(
            session, [Message.user(f"question {turn} " + "x" * 400), Message.assistant(f"answer {turn} " + "y" * 400)]
        )


async def test_a_quiet_full_chat_is_compacted_and_a_busy_or_small_one_is_not(
    services: Application, fake_openai: FakeOpenAI
) -> None:
    services.workspace.runtime_config_file.write_text(
        json.dumps({"compaction": {"maxContextTokens": 4000, "keepLastMessages": 4}})
    )
    fake_openai.set_responder(lambda request: SUMMARY)
    await fill(services, "quiet", 12)
    await fill(services, "busy", 12)
    await fill(services, "small", 1)
    busy = {"test:busy"}
    compactor = IdleCompactor(
        services.sessions, services.runner.systems[0].compaction,  # type: ignore[attr-defined]
        services.config_store, lambda session_id: session_id in busy,
    )  # fmt: skip

    assert await compactor.run(now=utc_now()) == 0  # nobody has been quiet long enough
    later = utc_now() + timedelta(minutes=61)
    assert await compactor.run(now=later) == 1

    quiet = await services.sessions.get("test:quiet")
    assert quiet is not None
    assert quiet.messages[0].content.startswith("[Conversation summary]")
    assert len(quiet.messages) == 5  # the summary and the last 4 messages
    assert len((await services.sessions.get("test:busy")).messages) == 24  # type: ignore[union-attr]
    assert len((await services.sessions.get("test:small")).messages) == 2  # type: ignore[union-attr]

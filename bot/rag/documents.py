"""Conversation documents: what one finished exchange becomes in the knowledge graph.

A document is named `conv_{session}_{YYYYMMDD_HHmmss}` and its text carries the date and the chat,
so whatever LightRAG extracts from it can be placed in time. Greetings and short exchanges are not
worth a graph extraction (a model call each) and are skipped, as golemcore does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.access.policy import sees_owner_memory
from bot.settings import RagConfig, RuntimeConfig

GREETINGS = frozenset(
    """hi hello hey hiya yo howdy greetings morning evening night thanks thank thx ty ok okay k sure yes no
    yep nope bye goodbye cya cheers cool great nice good fine lol haha hm hmm start help privet hallo hola
    salut ciao здравствуйте привет спасибо пока ок да нет""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
GLOBAL_RAG_WORKSPACE = "global"


def is_greeting(text: str) -> bool:
    """A message made only of greeting and small-talk words ("hi", "thanks!", "ok bye")."""
    words = _WORD.findall(text.lower())
    return 0 < len(words) <= 4 and all(word in GREETINGS for word in words)


def worth_indexing(user_text: str, assistant_text: str, config: RagConfig) -> bool:
    """Whether an exchange carries enough to be worth indexing (see `minExchangeChars`, `skipGreetings`)."""
    if not user_text.strip() or not assistant_text.strip():
        return False
    if config.skip_greetings and is_greeting(user_text):
        return False
    return len(user_text.strip()) + len(assistant_text.strip()) >= config.min_exchange_chars


def document_id(session_id: str, at: datetime) -> str:
    """`conv_{session}_{YYYYMMDD_HHmmss}`, the session id made safe for file and storage keys."""
    return f"conv_{_UNSAFE_ID.sub('_', session_id)}_{at.strftime('%Y%m%d_%H%M%S')}"


def rag_workspace_for(session_id: str, config: RuntimeConfig) -> str:
    """The LightRAG workspace a session's documents live in, and the one graph its turns read: one per
    chat (`chat`, `user`), or under `global` the owner's for the owner's own chats and one per chat for
    every other (a group's graph is the group's; see `bot.memory.audience`)."""
    memory = config.memory
    if memory.scope in ("chat", "user") or not sees_owner_memory(
        session_id, config.access.allowed_users, memory.owner_memory_everywhere
    ):
        return "chat_" + _UNSAFE_ID.sub("_", session_id).replace(".", "_")
    return GLOBAL_RAG_WORKSPACE


def document_text(session_id: str, at: datetime, user_text: str, assistant_text: str) -> str:
    return (
        f"Conversation in chat {session_id} on {at.strftime('%Y-%m-%d %H:%M')} ({at.tzname() or 'local time'})\n"
        f"User: {user_text.strip()}\n"
        f"Assistant: {assistant_text.strip()}"
    )


@dataclass
class RagDocument:
    """One exchange on its way into (or already in) the graph, with where it came from.

    `message_ids` lets forgetting a memory find the documents that carry it; `backend_id` is the id
    the backend gave it when that differs from `id` (a LightRAG server names documents itself).
    """

    id: str
    session_id: str
    rag_workspace: str
    text: str
    created_at: str
    message_ids: list[str] = field(default_factory=list)
    status: str = "queued"  # queued | indexed | failed | forgotten
    attempts: int = 0
    next_attempt_at: float = 0.0
    last_error: str | None = None
    backend_id: str | None = None

    def to_json(self, with_text: bool = True) -> dict[str, Any]:
        return {
            "id": self.id,
            "sessionId": self.session_id,
            "ragWorkspace": self.rag_workspace,
            "text": self.text if with_text else "",
            "createdAt": self.created_at,
            "messageIds": self.message_ids,
            "status": self.status,
            "attempts": self.attempts,
            "nextAttemptAt": self.next_attempt_at,
            "lastError": self.last_error,
            "backendId": self.backend_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RagDocument:
        return cls(
            id=str(data["id"]),
            session_id=str(data.get("sessionId", "")),
            rag_workspace=str(data.get("ragWorkspace", GLOBAL_RAG_WORKSPACE)),
            text=str(data.get("text", "")),
            created_at=str(data.get("createdAt", "")),
            message_ids=[str(m) for m in data.get("messageIds", [])],
            status=str(data.get("status", "queued")),
            attempts=int(data.get("attempts", 0)),
            next_attempt_at=float(data.get("nextAttemptAt", 0.0)),
            last_error=data.get("lastError"),
            backend_id=data.get("backendId"),
        )

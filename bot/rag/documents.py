"""Conversation documents: what one finished exchange becomes in the knowledge graph.

A document is named `conv_{session}_{YYYYMMDD_HHmmss}` and its text carries the date and the chat,
so whatever LightRAG extracts from it can be placed in time. Greetings, acknowledgements and short
exchanges are not worth a graph extraction (a model call) and are skipped, as golemcore does: a local
rule, no model asked.

Exchanges of one chat are indexed together: `batches` packs them into documents that fill LightRAG's
chunk (one extraction call each) and `batch_document` makes one such document, each exchange in it
under its own date-and-chat line. The store keeps every exchange's own record, with the id of the
document it went into as its `backend_id`, so forgetting one exchange finds the document that carries it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.access.policy import sees_owner_memory
from bot.domain.session import whole_chat_session_id
from bot.settings import RagConfig, RuntimeConfig

GREETINGS = frozenset(
    """hi hello hey hiya yo howdy greetings morning evening night thanks thank thx ty ok okay k sure yes no
    yep nope bye goodbye cya cheers cool great nice good fine lol haha hm hmm start help privet hallo hola
    salut ciao здравствуйте привет спасибо пока ок да нет""".split()
)
# Words that say nothing to remember on their own: small talk, thanks, agreement ("ok, got it, thanks a lot").
SMALL_TALK = GREETINGS | frozenset(
    """a an and the it that this that's it's is was so very much lot all right alright got see understood
    noted done perfect awesome wonderful excellent amazing brilliant super fantastic glad appreciate
    appreciated welcome helps helped helpful makes sense agree agreed exactly indeed true absolutely
    definitely sounds there wow oh ah oops sorry please again later soon you your for me i i'm im will just too
    really well great do cool good nice fine thank thanks still""".split()
)
_WORD = re.compile(r"\w+(?:'\w+)?", re.UNICODE)
_DIGIT = re.compile(r"\d")
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
GLOBAL_RAG_WORKSPACE = "global"
EXCHANGE_ID_PREFIX = "conv_"
BATCH_ID_PREFIX = "convbatch_"
# Between two exchanges of a batch document: a blank line, before the next one's date-and-chat line.
BATCH_SEPARATOR = "\n\n"
EXCHANGE_HEADER = "Conversation in chat "


def is_greeting(text: str) -> bool:
    """A message made only of greeting and small-talk words ("hi", "thanks!", "ok bye")."""
    words = _WORD.findall(text.lower())
    return 0 < len(words) <= 4 and all(word in GREETINGS for word in words)


def is_small_talk(text: str) -> bool:
    """A message with nothing in it to extract: only small-talk words ("ok, got it, thanks a lot!"),
    no number and no other word (a name, a place, a thing), so the graph would learn nothing from it."""
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    return not _DIGIT.search(text) and all(word in SMALL_TALK for word in words)


def worth_indexing(user_text: str, assistant_text: str, config: RagConfig) -> bool:
    """Whether an exchange carries enough to be worth indexing (see `minExchangeChars`, `skipGreetings`).

    What the user says decides: a greeting or an acknowledgement answered at length is still small
    talk (the assistant's reply to "thanks!" holds no fact of the user's)."""
    if not user_text.strip() or not assistant_text.strip():
        return False
    if config.skip_greetings and (is_greeting(user_text) or is_small_talk(user_text)):
        return False
    return len(user_text.strip()) + len(assistant_text.strip()) >= config.min_exchange_chars


def document_id(session_id: str, at: datetime) -> str:
    """`conv_{session}_{YYYYMMDD_HHmmss}`, the session id made safe for file and storage keys."""
    return f"conv_{_UNSAFE_ID.sub('_', session_id)}_{at.strftime('%Y%m%d_%H%M%S')}"


def is_exchange(doc: RagDocument) -> bool:
    """A conversation exchange (batched with its chat's others), not a part of a document sent in a chat."""
    return doc.id.startswith(EXCHANGE_ID_PREFIX)


def batches(
    docs: list[RagDocument], max_tokens: int, count: Callable[[str], int]
) -> list[tuple[list[RagDocument], bool]]:
    """`docs` (oldest first) packed into documents to index: each chat's exchanges, in order, as many
    as fit in `max_tokens` (by `count`, LightRAG's tokenizer) together; anything else alone. Each
    batch comes with whether it is full (the next exchange did not fit), so a caller may leave a batch
    that could still grow in the queue. `max_tokens` 0: every document alone."""
    packed: list[tuple[list[RagDocument], bool]] = []
    open_batches: dict[tuple[str, str], tuple[list[RagDocument], int]] = {}
    separator = count(BATCH_SEPARATOR)
    for doc in docs:
        if max_tokens <= 0 or not is_exchange(doc):
            packed.append(([doc], True))
            continue
        key = (doc.rag_workspace, doc.session_id)
        tokens = count(doc.text)
        current = open_batches.get(key)
        if current is not None and current[1] + separator + tokens <= max_tokens:
            current[0].append(doc)
            open_batches[key] = (current[0], current[1] + separator + tokens)
            continue
        if current is not None:
            packed.append((current[0], True))
        open_batches[key] = ([doc], tokens)
    packed.extend((members, tokens >= max_tokens) for members, tokens in open_batches.values())
    return packed


def batch_document(members: list[RagDocument]) -> RagDocument:
    """The document a batch of one chat's exchanges is indexed as (the exchange itself when alone).

    Its id names the first exchange and a digest of all (so a batch made again without one of them,
    after a forget, is a new document), and its text is the exchanges' texts, each with its own
    date-and-chat line, so every fact extracted from it is placed in time and in its exchange."""
    if len(members) == 1:
        return members[0]
    first = members[0]
    digest = hashlib.sha1("\n".join(doc.id for doc in members).encode()).hexdigest()[:8]
    return RagDocument(
        id=f"{BATCH_ID_PREFIX}{first.id.removeprefix(EXCHANGE_ID_PREFIX)}_{len(members)}_{digest}",
        session_id=first.session_id,
        rag_workspace=first.rag_workspace,
        text=BATCH_SEPARATOR.join(doc.text for doc in members),
        created_at=first.created_at,
        message_ids=[message_id for doc in members for message_id in doc.message_ids],
    )


def exchanges_in(text: str) -> list[str]:
    """The exchanges of a batch document's text, or of a chunk of one, each with its date-and-chat line
    (a chunk cut from a long document may start in the middle of one); one exchange's text is itself."""
    first, *rest = text.split(BATCH_SEPARATOR + EXCHANGE_HEADER)
    return [first, *(EXCHANGE_HEADER + part for part in rest)]


def rag_workspace_for(session_id: str, config: RuntimeConfig) -> str:
    """The LightRAG workspace a session's documents live in, and the one graph its turns read: one per
    chat (`chat`, `user`), or under `global` the owner's for the owner's own chats and one per chat for
    every other (a group's graph is the group's, shared by its topics; see `bot.memory.audience`)."""
    memory = config.memory
    session_id = whole_chat_session_id(session_id)
    if memory.scope in ("chat", "user") or not sees_owner_memory(
        session_id, config.access.allowed_users, memory.owner_memory_everywhere
    ):
        return "chat_" + _UNSAFE_ID.sub("_", session_id).replace(".", "_")
    return GLOBAL_RAG_WORKSPACE


def document_text(session_id: str, at: datetime, user_text: str, assistant_text: str) -> str:
    return (
        f"{EXCHANGE_HEADER}{session_id} on {at.strftime('%Y-%m-%d %H:%M')} ({at.tzname() or 'local time'})\n"
        f"User: {user_text.strip()}\n"
        f"Assistant: {assistant_text.strip()}"
    )


@dataclass
class RagDocument:
    """One exchange on its way into (or already in) the graph, with where it came from.

    `message_ids` lets forgetting a memory find the documents that carry it; `backend_id` is the id
    the backend gave it when that differs from `id` (a LightRAG server names documents itself);
    `tried_as` names every backend document it was sent in, recorded before each try: an insert whose
    wait ran out may still finish in the backend, under a name the bot never learned the id of.
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
    tried_as: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        """Every name the backend may hold this exchange under: its own id, the documents it was sent in, and
        the backend's id of the one it is indexed in."""
        return list(dict.fromkeys([self.id, *self.tried_as, *([self.backend_id] if self.backend_id else [])]))

    def to_json(self, with_text: bool = True) -> dict[str, Any]:
        record: dict[str, Any] = {
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
        if self.tried_as:
            record["triedAs"] = self.tried_as
        return record

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
            tried_as=[str(name) for name in data.get("triedAs", [])],
        )

    def note_tried(self, name: str) -> bool:
        """Put `name` last in `tried_as` (once); whether that changed it. The last name is the one the
        document is indexed under once it has a backend id."""
        if self.tried_as[-1:] == [name]:
            return False
        if name in self.tried_as:
            self.tried_as.remove(name)
        self.tried_as.append(name)
        return True

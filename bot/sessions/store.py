"""`SessionFileStore`: one whole, valid JSON document per chat under `sessions/`.

A crash at any moment leaves the old or the new version (atomic rewrite). A file that does not parse
is never overwritten: it is moved aside as `<name>.corrupt-<time>` so nothing is lost, and the chat
starts a fresh session. A metadata value of the wrong type (a hand edit) does not cost the session: it
is logged and dropped to its default (`SessionMetadata`).

The whole document is written each time (`RewriteSchedule` says when); each message's JSON is kept from
the write before and only messages added or replaced since are serialized again (`MessageJsonCache`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from bot.domain.message import Message
from bot.domain.session import AgentSession, checked_session_id
from bot.domain.session_metadata import METADATA_PROBLEMS
from bot.storage.durability import DeferredSync
from bot.storage.files import put_aside_sync, read_text_sync, write_atomic

log = logging.getLogger(__name__)


class CorruptSession(Exception):
    """A stored session did not parse; it was put aside under the name `quarantined_as`."""

    def __init__(self, session_id: str, quarantined_as: str) -> None:
        super().__init__(f"session {session_id} was unreadable and was moved to {quarantined_as}")
        self.session_id = session_id
        self.quarantined_as = quarantined_as


@dataclass
class _Written:
    """One session's messages as last written, in order, and their JSONs joined: ready to be extended by
    the messages appended since."""

    messages: list[Message] = field(default_factory=list)
    joined: str = ""


class MessageJsonCache:
    """The JSON of a live session's messages as last written, so a save serializes only what is new.

    A stored message is never edited in place (`Message` is frozen): a change to the conversation appends
    to its list or puts a new list in its place. When the session still begins with the messages of the
    last document (a pointer comparison per message), the new document is that one's messages with the
    new ones' JSON added; otherwise (a compaction, a retry, `/new`: rare) it is made again whole. Entries
    live as long as their session object: the session cache dropping a session drops them too.
    """

    def __init__(self) -> None:
        self._by_session: dict[int, _Written] = {}

    def document(self, session: AgentSession) -> bytes:
        """The session as compact JSON, the same document as `model_dump_json(by_alias, exclude_none)`."""
        key = id(session)
        written = self._by_session.get(key)
        if written is None:
            written = self._by_session[key] = _Written()
            weakref.finalize(session, self._by_session.pop, key, None)
        messages = session.messages
        count = len(written.messages)
        # A list comparison takes each pair that is the same object as equal without looking into it.
        if not (len(messages) >= count and messages[:count] == written.messages):
            written.messages, written.joined, count = [], "", 0
        added = messages[count:]
        parts = [written.joined] if count else []
        parts += [message.model_dump_json(by_alias=True, exclude_none=True) for message in added]
        written.joined = ",".join(parts)
        written.messages.extend(added)
        head = session.model_dump_json(by_alias=True, exclude_none=True, exclude={"messages"})
        return f'{head[:-1]},"messages":[{written.joined}]}}'.encode()


def session_from_json(text: str, where: str) -> AgentSession:
    """The session a stored document holds. Raises `ValidationError` when it is not one; a metadata value
    of the wrong type is logged and dropped to its default, the session kept."""
    problems: list[tuple[str, str]] = []
    session = AgentSession.model_validate_json(text, context={METADATA_PROBLEMS: problems})
    for key, reason in problems:
        # The session is kept; only this value goes, and the next save writes the document without it.
        log.warning("[Session] %s: metadata key %r ignored, its default used instead (%s)", where, key, reason)
    return session


class SessionFileStore:
    """Reads and atomically writes `sessions/{channelType}:{chatId}.json`."""

    def __init__(self, sessions_dir: Path) -> None:
        self._dir = sessions_dir
        self._json = MessageJsonCache()

    def path_for(self, session_id: str) -> Path:
        return self._dir / f"{checked_session_id(session_id)}.json"

    def load_sync(self, session_id: str) -> tuple[AgentSession, int] | None:
        """The stored session and its file's size, or None if there is none. Raises `CorruptSession`
        after quarantining the file."""
        path = self.path_for(session_id)
        text = read_text_sync(path)
        if text is None:
            return None
        try:
            session = session_from_json(text, str(path))
        except ValidationError as error:
            quarantined = put_aside_sync(path)
            log.error("[Session] %s is unreadable (%s); moved to %s", path, error.error_count(), quarantined)
            raise CorruptSession(session_id, quarantined.name) from error
        return session, len(text.encode())

    def document(self, session: AgentSession) -> bytes:
        """The file's content: the whole session as compact JSON (no indentation: it is rewritten every turn)."""
        return self._json.document(session)

    async def write(self, session_id: str, document: bytes, deferred: DeferredSync | None = None) -> None:
        """Replace the session's file with `document` (see `SessionService.save`); with `deferred`, its
        fsyncs are left to that one's next round."""
        await write_atomic(self.path_for(session_id), document, deferred)

    async def delete(self, session_id: str) -> None:
        await asyncio.to_thread(self.path_for(session_id).unlink, True)

    def list_ids(self) -> list[str]:
        """Ids of every stored session, oldest file first."""
        if not self._dir.is_dir():
            return []
        files = sorted(self._dir.glob("*.json"), key=lambda path: path.stat().st_mtime)
        return [path.name.removesuffix(".json") for path in files]

"""`ConsoleAuth`: login links and console sessions.

`/console` in a private chat issues a link holding a random token that works once, within
`console.linkMinutes`. Opening it shows a sign-in form that posts the token back (so a link preview
fetched by a messenger never uses it up); the post turns it into a session: an HttpOnly,
SameSite=Strict cookie naming the session, and a CSRF token that every change must carry.

Where they are kept (`LoginStorage`): in the process's memory (a restart logs everyone out), or with
`BOT_DATABASE_URL` in the database (`LoginsInDatabase`), so that replicas behind one address share them: a link
sent through one replica opens on another, and a session works on every replica until it ends on any.
Tokens and session ids are kept as their SHA-256 digests: what is stored cannot be used to log in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

COOKIE_NAME = "console_session"


@dataclass(frozen=True)
class Viewer:
    """Whose console a login opens: the owner's (everything), or one person's own memory."""

    # The person's memory key (`telegram:<user id>`, the id of their private chat with the bot).
    person: str
    owner: bool


@dataclass
class ConsoleSession:
    viewer: Viewer
    expires_at: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def accepts(self, csrf: str | None) -> bool:
        return csrf is not None and hmac.compare_digest(csrf, self.csrf)


class LoginStorage(Protocol):
    """Login links and sessions by the digest of their token (`digest`); times in seconds since the epoch."""

    async def add_link(self, key: str, viewer: Viewer, expires_at: float) -> None: ...

    async def link(self, key: str) -> tuple[Viewer, float] | None: ...

    async def take_link(self, key: str) -> tuple[Viewer, float] | None:
        """The link, removed: of callers taking one link at once, one alone gets it."""
        ...

    async def add_session(self, key: str, session: ConsoleSession) -> None: ...

    async def session(self, key: str) -> ConsoleSession | None: ...

    async def end_session(self, key: str) -> None: ...

    async def drop_expired(self, now: float) -> None: ...


class LoginsInMemory:
    """The process's own links and sessions."""

    def __init__(self) -> None:
        self._links: dict[str, tuple[Viewer, float]] = {}
        self._sessions: dict[str, ConsoleSession] = {}

    async def add_link(self, key: str, viewer: Viewer, expires_at: float) -> None:
        self._links[key] = (viewer, expires_at)

    async def link(self, key: str) -> tuple[Viewer, float] | None:
        return self._links.get(key)

    async def take_link(self, key: str) -> tuple[Viewer, float] | None:
        return self._links.pop(key, None)

    async def add_session(self, key: str, session: ConsoleSession) -> None:
        self._sessions[key] = session

    async def session(self, key: str) -> ConsoleSession | None:
        return self._sessions.get(key)

    async def end_session(self, key: str) -> None:
        self._sessions.pop(key, None)

    async def drop_expired(self, now: float) -> None:
        self._links = {key: link for key, link in self._links.items() if link[1] > now}
        self._sessions = {key: session for key, session in self._sessions.items() if session.expires_at > now}


def digest(secret: str) -> str:
    """What a token or session id is kept under."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ConsoleAuth:
    """Issues login links, redeems each once, and finds the session a cookie names."""

    def __init__(self, storage: LoginStorage | None = None, now: Callable[[], float] = time.time) -> None:
        self._storage: LoginStorage = storage if storage is not None else LoginsInMemory()
        self._now = now

    async def issue_link(self, viewer: Viewer, minutes: float) -> str:
        """A new login token for `viewer`, valid once within `minutes`."""
        await self._storage.drop_expired(self._now())
        # Hex: nothing in it that a chat's formatting could take for markup.
        token = secrets.token_hex(24)
        await self._storage.add_link(digest(token), viewer, self._now() + minutes * 60)
        return token

    async def link_is_valid(self, token: str) -> bool:
        found = await self._storage.link(digest(token))
        return found is not None and found[1] > self._now()

    async def redeem(self, token: str, hours: float) -> tuple[str, ConsoleSession] | None:
        """The new session (its cookie value, and it) for an unused, unexpired token; None otherwise. The
        token is gone either way."""
        found = await self._storage.take_link(digest(token))
        if found is None or found[1] <= self._now():
            return None
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(found[0], self._now() + hours * 3600)
        await self._storage.add_session(digest(session_id), session)
        return session_id, session

    async def session(self, cookie: str | None) -> ConsoleSession | None:
        if not cookie:
            return None
        key = digest(cookie)
        session = await self._storage.session(key)
        if session is not None and session.expires_at <= self._now():
            await self._storage.end_session(key)
            return None
        return session

    async def end(self, cookie: str | None) -> None:
        if cookie:
            await self._storage.end_session(digest(cookie))

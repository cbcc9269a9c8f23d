"""`ConsoleAuth`: login links and console sessions, kept in memory (a restart logs everyone out).

`/console` in a private chat issues a link holding a random token that works once, within
`console.linkMinutes`. Opening it shows a sign-in form that posts the token back (so a link preview
fetched by a messenger never uses it up); the post turns it into a session: an HttpOnly,
SameSite=Strict cookie naming the session, and a CSRF token that every change must carry.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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


class ConsoleAuth:
    """Issues login links, redeems each once, and finds the session a cookie names."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._links: dict[str, tuple[Viewer, float]] = {}
        self._sessions: dict[str, ConsoleSession] = {}

    def issue_link(self, viewer: Viewer, minutes: float) -> str:
        """A new login token for `viewer`, valid once within `minutes`."""
        self._drop_expired()
        # Hex: nothing in it that a chat's formatting could take for markup.
        token = secrets.token_hex(24)
        self._links[token] = (viewer, self._now() + minutes * 60)
        return token

    def link_is_valid(self, token: str) -> bool:
        found = self._links.get(token)
        return found is not None and found[1] > self._now()

    def redeem(self, token: str, hours: float) -> tuple[str, ConsoleSession] | None:
        """The new session (its cookie value, and it) for an unused, unexpired token; None otherwise. The
        token is gone either way."""
        found = self._links.pop(token, None)
        if found is None or found[1] <= self._now():
            return None
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(found[0], self._now() + hours * 3600)
        self._sessions[session_id] = session
        return session_id, session

    def session(self, cookie: str | None) -> ConsoleSession | None:
        if not cookie:
            return None
        session = self._sessions.get(cookie)
        if session is None or session.expires_at <= self._now():
            self._sessions.pop(cookie, None)
            return None
        return session

    def end(self, cookie: str | None) -> None:
        if cookie:
            self._sessions.pop(cookie, None)

    def _drop_expired(self) -> None:
        now = self._now()
        self._links = {token: link for token, link in self._links.items() if link[1] > now}
        self._sessions = {key: session for key, session in self._sessions.items() if session.expires_at > now}

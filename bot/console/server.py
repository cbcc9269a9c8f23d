"""`ConsoleServer`: the console's routes on the HTTP listener, and what every request passes through.

Every page needs a session (the cookie a login link gave); every change is a POST carrying the
session's CSRF token; owner-only pages refuse anyone else. Each response says it may not be framed,
cached or sent as a referrer, and allows only the console's own scripts and styles.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlencode

from aiohttp import web

from bot.console.auth import COOKIE_NAME, ConsoleAuth, ConsoleSession, Viewer
from bot.console.html import PREFIX, esc, hidden, page
from bot.database.connection import DatabaseError
from bot.http.listener import HttpListener
from bot.runtime_config import RuntimeConfigStore

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
NO_SESSION = "Not logged in, or the login has expired. Send /console to the bot for a new link."
NO_DATABASE = "The database does not answer just now, so this page cannot be shown. Try again in a moment."


@dataclass
class Visit:
    """One request to a console page by a logged-in viewer; `form` holds a POST's fields."""

    request: web.Request
    session: ConsoleSession
    form: dict[str, str]

    @property
    def viewer(self) -> Viewer:
        return self.session.viewer

    @property
    def csrf(self) -> str:
        return self.session.csrf

    def page(self, title: str, body: str, scripts: tuple[str, ...] = ()) -> web.Response:
        return html_response(page(title, body, self.viewer, self.csrf, scripts))


PageHandler = Callable[[Visit], Awaitable[web.StreamResponse]]


def html_response(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", headers=SECURITY_HEADERS)


def json_response(answer: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(answer, status=status, headers=SECURITY_HEADERS)


def refusal(
    text: str, status: int, viewer: Viewer | None = None, csrf: str = "", request: web.Request | None = None
) -> web.Response:
    """A refusal as a page, or as `{"error": text}` to a page's script asking for JSON (it shows the reason)."""
    if request is not None and request.path.endswith(".json"):
        return json_response({"error": text}, status)
    return html_response(page("Refused", f'<p class="error">{esc(text)}</p>', viewer, csrf), status)


def back_to(path: str, note: str = "", error: str = "") -> NoReturn:
    """After a change: back to a page (a GET, so a reload repeats nothing), with what happened."""
    query = urlencode({key: value for key, value in (("note", note), ("error", error)) if value})
    location = f"{PREFIX}/{path}" + (("&" if "?" in path else "?") + query if query else "")
    raise web.HTTPSeeOther(location, headers=SECURITY_HEADERS)


def notes_of(request: web.Request) -> str:
    """The outcome a change redirected with, shown at the top of the page."""
    shown = []
    if note := request.query.get("note"):
        shown.append(f'<p class="note" role="status">{esc(note)}</p>')
    if error := request.query.get("error"):
        shown.append(f'<p class="error" role="alert">{esc(error)}</p>')
    return "".join(shown)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _answering(handler: Handler) -> Handler:
    """`handler`, answering a database that does not answer (logins and, with it, memory live there) with a
    page that says so instead of a bare 500."""

    async def answering(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except DatabaseError as error:
            log.error("[Console] %s %s: the database does not answer (%s)", request.method, request.path, error)
            return refusal(NO_DATABASE, 503, request=request)

    return answering


class ConsoleServer:
    """Adds the console's routes to the listener (before it starts)."""

    def __init__(self, auth: ConsoleAuth, config_store: RuntimeConfigStore) -> None:
        self.auth = auth
        self._config_store = config_store

    def install(
        self, listener: HttpListener, pages: dict[str, tuple[PageHandler | None, PageHandler | None, bool]]
    ) -> None:
        """`pages`: by path under `/console/`, the GET and POST handlers and whether only the owner may use it."""
        listener.add_route("GET", PREFIX, self._home)
        listener.add_route("GET", f"{PREFIX}/", self._home)
        listener.add_route("GET", f"{PREFIX}/login", _answering(self._login_page))
        listener.add_route("POST", f"{PREFIX}/login", _answering(self._login))
        listener.add_route("POST", f"{PREFIX}/logout", _answering(self._logout))
        listener.add_route("GET", f"{PREFIX}/static/{{name}}", self._static)
        for path, (get, post, owner_only) in pages.items():
            if get is not None:
                listener.add_route("GET", f"{PREFIX}/{path}", _answering(self._guarded(get, owner_only, change=False)))
            if post is not None:
                listener.add_route("POST", f"{PREFIX}/{path}", _answering(self._guarded(post, owner_only, change=True)))

    def _enabled(self) -> None:
        if not self._config_store.in_force().console.enabled:
            raise web.HTTPNotFound()

    def _guarded(
        self, handler: PageHandler, owner_only: bool, *, change: bool
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def guarded(request: web.Request) -> web.StreamResponse:
            self._enabled()
            session = await self.auth.session(request.cookies.get(COOKIE_NAME))
            if session is None:
                return refusal(NO_SESSION, 401, request=request)
            form: dict[str, str] = {}
            if change:
                posted = await request.post()
                form = {key: value for key, value in posted.items() if isinstance(value, str)}
                if not session.accepts(form.get("csrf")):
                    log.warning("[Console] Refused a change without a valid CSRF token: %s", request.path)
                    return refusal(
                        "This change was refused: the form's security token is missing or wrong. "
                        "Reload the page and try again.",
                        403,
                        session.viewer,
                        session.csrf,
                    )
            if owner_only and not session.viewer.owner:
                return refusal("This page is the owner's.", 403, session.viewer, session.csrf, request)
            return await handler(Visit(request, session, form))

        return guarded

    async def _home(self, request: web.Request) -> web.StreamResponse:
        self._enabled()
        raise web.HTTPFound(f"{PREFIX}/memory", headers=SECURITY_HEADERS)

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        """A valid link shows a form that posts its token (sent at once by console.js); opening the link
        uses nothing up, so a link preview cannot log anyone in or spend the link."""
        self._enabled()
        token = request.query.get("token", "")
        if not await self.auth.link_is_valid(token):
            return refusal(
                "This login link has expired or was already used. Send /console to the bot for a new one.", 403
            )
        body = (
            f'<form id="login" method="post" action="{PREFIX}/login">{hidden("token", token)}'
            '<button type="submit">Open the console</button></form>'
        )
        return html_response(page("Log in", body, None, scripts=("login.js",)))

    async def _login(self, request: web.Request) -> web.StreamResponse:
        self._enabled()
        posted = await request.post()
        token = posted.get("token")
        config = self._config_store.in_force().console
        redeemed = await self.auth.redeem(token, config.session_hours) if isinstance(token, str) else None
        if redeemed is None:
            log.warning("[Console] Refused a login with an expired, used or unknown link")
            return refusal(
                "This login link has expired or was already used. Send /console to the bot for a new one.", 403
            )
        cookie, session = redeemed
        log.info("[Console] %s logged in%s", session.viewer.person, " (owner)" if session.viewer.owner else "")
        response = web.HTTPSeeOther(f"{PREFIX}/memory", headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE_NAME, cookie, path=PREFIX, httponly=True, samesite="Strict",
            secure=(config.public_url or "").startswith("https://"), max_age=int(config.session_hours * 3600),
        )  # fmt: skip
        raise response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        self._enabled()
        cookie = request.cookies.get(COOKIE_NAME)
        session = await self.auth.session(cookie)
        posted = await request.post()
        csrf = posted.get("csrf")
        if session is None or not session.accepts(csrf if isinstance(csrf, str) else None):
            return refusal(NO_SESSION, 401)
        await self.auth.end(cookie)
        response = html_response(
            page("Logged out", "<p>Logged out. Send /console to the bot to log in again.</p>", None)
        )
        response.del_cookie(COOKIE_NAME, path=PREFIX)
        return response

    async def _static(self, request: web.Request) -> web.StreamResponse:
        self._enabled()
        name = request.match_info["name"]
        path = STATIC_DIR / name
        if "/" in name or name.startswith(".") or path.suffix not in STATIC_TYPES or not path.is_file():
            raise web.HTTPNotFound()
        return web.Response(
            body=path.read_bytes(), content_type=STATIC_TYPES[path.suffix], charset="utf-8", headers=SECURITY_HEADERS
        )

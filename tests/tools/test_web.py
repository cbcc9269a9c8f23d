"""web_fetch and web_search through the pipeline, against a fake web server and fake search
providers on 127.0.0.1: HTML to Markdown, private addresses and redirects to them refused, huge
pages cut, the providers' HTTP APIs, and the switches that turn the tools off."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.app import Application
from tests.conftest import TEST_API_KEY, env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say
from tests.tools.test_mcp import offered, tool_results, write_config

BRAVE_KEY = "brave-key-5517-abcdef"

ARTICLE = """<!doctype html><html><head><title>Otters of the North</title>
<script>var tracking = "do-not-show";</script><style>body{color:red}</style></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Otters of the North</h1>
<p>Otters are <b>semi-aquatic</b> mammals. They live along rivers and coasts and eat fish,
crabs and shellfish. Sea otters use stones as tools to open shells.</p>
<h2>Where they live</h2>
<p>Eurasian otters are found from Ireland to Japan. Read the <a href="http://example.org/otters">full survey</a>
for the numbers of each region and the way they were counted.</p>
<ul><li>Rivers, where they den in the banks under the roots of old trees</li>
<li>Lakes, where they hunt at dawn and at dusk along the reed beds</li>
<li>Coasts, where they feed in the kelp forests and rest on the rocks</li></ul>
</article><footer>Copyright the otter society</footer></body></html>"""

# A page built by scripts: little text, and most of its bytes scripts, styles and data for them.
APP_SHELL = """<!doctype html><html><head><title>Shop</title><style>.cart{display:none}</style>
<script>window.__STATE__ = {"token": "do-not-show"};</script></head>
<body><!-- build 4711 --><div id="root"><h1>Opening hours</h1><p>Monday to Friday, 9 to 18.</p></div>
<noscript>You need to enable JavaScript to run this app.</noscript>
<script id="__NEXT_DATA__" type="application/json">{"props": {"pageProps": {"items": [1, 2, 3]}}}</script>
<template><p>a row not shown yet</p></template></body></html>"""
CYRILLIC = "Погода в Москве: завтра снег и ветер, до минус десяти градусов. " * 8
CYRILLIC_PAGE = (
    f'<html><head><meta charset="windows-1251"><title>Погода</title></head><body><p>{CYRILLIC}</p></body></html>'
)


@dataclass
class FakeWeb:
    """A web server with pages, redirects and the search providers' APIs; it records every request."""

    port: int = 0
    requests: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.requests.append(request.path_qs)
            self.headers.append(dict(request.headers))
            response: web.StreamResponse = await handler(request)
            return response

        app.middlewares.append(record)
        app.router.add_get("/article", self._page(ARTICLE, "text/html"))
        app.router.add_get("/secret", self._page("internal only", "text/plain"))
        app.router.add_get("/to-localhost", self._redirect(lambda: f"http://localhost:{self.port}/secret"))
        app.router.add_get("/to-private", self._redirect(lambda: "http://10.20.30.40/admin"))
        app.router.add_get("/to-article", self._redirect(lambda: "/article"))
        app.router.add_get("/huge", self._huge)
        app.router.add_get("/leaky", self._page(f"<p>key: {TEST_API_KEY}</p>", "text/html"))
        app.router.add_get("/env-echo", self._env_echo)
        app.router.add_get("/empty", self._page("", "text/html"))
        app.router.add_get("/image", self._page("\x89PNG....", "image/png"))
        app.router.add_get("/app-shell", self._page(APP_SHELL, "text/html"))
        app.router.add_get("/cyrillic", self._bytes(CYRILLIC.encode("cp1251"), "text/plain"))  # no charset said
        app.router.add_get("/cyrillic-page", self._bytes(CYRILLIC_PAGE.encode("cp1251"), "text/html"))
        app.router.add_get("/odd-charset", self._bytes(b"plain words", "text/plain; charset=x-unheard-of"))
        app.router.add_get("/binary-as-text", self._bytes(bytes(range(256)) * 40, "text/html"))
        app.router.add_get("/nested", self._bytes(b"<div>" * 5000 + b"at the bottom" + b"</div>" * 5000, "text/html"))
        app.router.add_get("/searx/search", self._searxng)
        app.router.add_get(
            "/searx-odd/search", self._page('{"results": {"error": "engine overloaded"}}', "application/json")
        )
        app.router.add_get("/searx-html-only/search", self._page("<h1>403 Forbidden</h1>", "text/html", status=403))
        app.router.add_get("/brave", self._brave)
        app.router.add_post("/tavily", self._tavily)
        return app

    @staticmethod
    def _page(text: str, content_type: str, status: int = 200) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(text=text, content_type=content_type, status=status)

        return handler

    @staticmethod
    def _bytes(body: bytes, content_type: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=body, headers={"Content-Type": content_type})

        return handler

    @staticmethod
    async def _env_echo(request: web.Request) -> web.Response:
        name = request.query["name"]
        return web.Response(text=f"{name} is {os.environ.get(name, '')}", content_type="text/plain")

    @staticmethod
    def _redirect(target: Any) -> Any:
        async def handler(request: web.Request) -> web.Response:
            raise web.HTTPFound(target())

        return handler

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        await response.prepare(request)
        await response.write(b"<html><body><article>")
        paragraph = b"<p>" + b"Lorem ipsum dolor sit amet. " * 40 + b"</p>\n"
        for _ in range(20_000):  # about 23 MB, if anyone read it all
            await response.write(paragraph)
        await response.write_eof()
        return response

    async def _searxng(self, request: web.Request) -> web.Response:
        assert request.query["format"] == "json"
        query = request.query["q"]
        results = [
            {"title": f"{query} result {n}", "url": f"https://example.org/{n}", "content": f"About {query} ({n})"}
            for n in range(1, 9)
        ]
        return web.json_response({"query": query, "results": results})

    async def _brave(self, request: web.Request) -> web.Response:
        token = request.headers.get("X-Subscription-Token", "")
        if token != BRAVE_KEY:
            return web.json_response({"error": "unauthorized"}, status=401)
        rows = [
            {"title": "Brave hit", "url": "https://brave.example/1", "description": f"token seen: {token}"},
        ]
        return web.json_response({"web": {"results": rows}})

    async def _tavily(self, request: web.Request) -> web.Response:
        body = await request.json()
        rows = [{"title": "Tavily hit", "url": "https://tavily.example/1", "content": f"for {body['query']}"}]
        return web.json_response({"results": rows[: body["max_results"]]})


@pytest.fixture
async def fake_web() -> AsyncIterator[FakeWeb]:
    fake = FakeWeb()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.port = runner.addresses[0][1]
    yield fake
    await runner.cleanup()


@pytest.fixture
async def web_services(workspace_dir: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Application]:
    built = Application(env_for(workspace_dir, fake_openai, brave_api_key=BRAVE_KEY))
    yield built
    await built.stop()


async def fetch_through_the_bot(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, url: str, web_config: dict[str, Any]
) -> str:
    write_config(services, {"web": web_config})
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("web_fetch", {"url": url}, id="f1")]), "read it")
    assert await say(services, channel, "1", f"read {url}") == "read it"
    return tool_results(fake_openai)[-1]  # this turn's: the newest


async def search_through_a_searxng(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, search_url: str
) -> str:
    """What the model reads of a web_search for 'otters' through the SearXNG at `search_url`."""
    write_config(services, {"web": {"searchProvider": "searxng", "searchUrl": search_url}})
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("web_search", {"query": "otters"}, id="s1")]), "searched")
    assert await say(services, channel, "1", "search otters") == "searched"
    return tool_results(fake_openai)[-1]  # this turn's: the newest


LOCAL_ONLY = {"allowPrivateHosts": ["127.0.0.1"]}


async def test_a_page_becomes_readable_markdown(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/article", LOCAL_ONLY)
    assert result.startswith(f"# Otters of the North\n\nSource: {fake_web.root}/article\n\n")
    assert result.count("# Otters of the North") == 1
    assert "Otters are **semi-aquatic** mammals." in result
    assert "## Where they live" in result
    assert "[full survey](http://example.org/otters)" in result
    assert "* Rivers, where they den" in result or "- Rivers, where they den" in result
    for boilerplate in ("do-not-show", "color:red", "Copyright the otter society", "About"):
        assert boilerplate not in result
    assert fake_web.headers[0]["User-Agent"] == "memory-bot/0.1 (web_fetch)"
    assert "web_fetch" in offered(fake_openai, 0)


async def test_a_redirect_is_followed_and_checked(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/to-article", LOCAL_ONLY)
    assert f"Source: {fake_web.root}/article" in result
    assert fake_web.requests == ["/to-article", "/article"]


async def test_loopback_is_refused_when_private_addresses_are_not_allowed(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/article", {})
    assert result == "Error: 127.0.0.1 is a private or local address; fetching it is not allowed"
    by_name = await fetch_through_the_bot(
        web_services, channel, fake_openai, f"http://localhost:{fake_web.port}/article", {}
    )
    assert by_name.startswith("Error: localhost resolves to 127.0.0.1, a private or local address")
    assert fake_web.requests == []  # refused before any connection


async def test_a_redirect_to_a_private_address_is_refused(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    # 127.0.0.1 is allowed by name (the fake server), its redirects are checked like any URL.
    to_localhost = await fetch_through_the_bot(
        web_services, channel, fake_openai, f"{fake_web.root}/to-localhost", LOCAL_ONLY
    )
    assert to_localhost.startswith("Error: localhost resolves to 127.0.0.1, a private or local address")
    to_private = await fetch_through_the_bot(
        web_services, channel, fake_openai, f"{fake_web.root}/to-private", LOCAL_ONLY
    )
    assert to_private == "Error: 10.20.30.40 is a private or local address; fetching it is not allowed"
    assert fake_web.requests == ["/to-localhost", "/to-private"]  # /secret was never asked for


async def test_a_huge_page_is_cut_at_the_download_and_result_limits(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    config = {**LOCAL_ONLY, "maxDownloadBytes": 200_000, "maxResultChars": 3000}
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/huge", config)
    assert "Lorem ipsum dolor sit amet." in result
    assert "[The page was cut at 200000 bytes: web.maxDownloadBytes]" in result
    assert "[… the rest of the page cut: web.maxResultChars]" in result  # converted only as far as shown
    assert len(result) < 3400


async def test_what_is_not_a_web_page_gets_a_clear_error(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    file_url = await fetch_through_the_bot(web_services, channel, fake_openai, "file:///etc/passwd", LOCAL_ONLY)
    assert file_url == "Error: only http and https URLs can be fetched, not 'file'"
    image = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/image", LOCAL_ONLY)
    assert image == f"Error: {fake_web.root}/image is image/png, not a page that can be read as text"
    empty = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/empty", LOCAL_ONLY)
    assert empty == f"Source: {fake_web.root}/empty\n\n[The page has no readable text]"
    missing = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/nope", LOCAL_ONLY)
    assert missing == f"Error: {fake_web.root}/nope answered HTTP 404 Not Found"


async def test_a_page_in_another_charset_or_an_odd_one_reads_as_its_text(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    undeclared = await fetch_through_the_bot(
        web_services, channel, fake_openai, f"{fake_web.root}/cyrillic", LOCAL_ONLY
    )
    assert CYRILLIC.strip() in undeclared
    page = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/cyrillic-page", LOCAL_ONLY)
    assert page.startswith("# Погода\n") and "завтра снег и ветер" in page
    odd = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/odd-charset", LOCAL_ONLY)
    assert odd == f"Source: {fake_web.root}/odd-charset\n\nplain words"


async def test_binary_data_sent_as_text_and_markup_nested_too_deep_get_clear_results(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    url = f"{fake_web.root}/binary-as-text"
    binary = await fetch_through_the_bot(web_services, channel, fake_openai, url, LOCAL_ONLY)
    assert binary == f"Error: {url} is binary data (sent as text/html), not a page that can be read as text"
    nested = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/nested", LOCAL_ONLY)
    assert nested == f"Source: {fake_web.root}/nested\n\nat the bottom"


async def test_a_page_never_shows_the_model_a_secret(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/leaky", LOCAL_ONLY)
    assert "key: [REDACTED]" in result
    assert TEST_API_KEY not in json.dumps(fake_openai.chat_requests())


async def test_a_secret_anywhere_in_the_environment_is_scrubbed_from_results(
    web_services: Application,
    channel: RecordingChannel,
    fake_openai: FakeOpenAI,
    fake_web: FakeWeb,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BILLING_SERVICE_TOKEN", "tok-2291-qwerty-zx")
    url = f"{fake_web.root}/env-echo?name=BILLING_SERVICE_TOKEN"
    result = await fetch_through_the_bot(web_services, channel, fake_openai, url, LOCAL_ONLY)
    assert result.endswith("BILLING_SERVICE_TOKEN is [REDACTED]")


async def test_web_fetch_can_be_switched_off(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    write_config(web_services, {"web": {"fetchEnabled": False}})
    await say(web_services, channel, "1", "hi")
    assert "web_fetch" not in offered(fake_openai)
    assert "web_search" not in offered(fake_openai)  # no provider configured: off


async def test_web_search_through_searxng(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    write_config(
        web_services,
        {"web": {"searchProvider": "searxng", "searchUrl": f"{fake_web.root}/searx", "searchMaxResults": 3}},
    )
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("web_search", {"query": "sea otters"}, id="s1")]), "found")
    assert await say(web_services, channel, "1", "search sea otters") == "found"
    assert "web_search" in offered(fake_openai, 0)
    assert tool_results(fake_openai) == [
        "Results for 'sea otters':\n"
        "1. sea otters result 1\n   https://example.org/1\n   About sea otters (1)\n"
        "2. sea otters result 2\n   https://example.org/2\n   About sea otters (2)\n"
        "3. sea otters result 3\n   https://example.org/3\n   About sea otters (3)"
    ]
    assert fake_web.requests == ["/searx/search?q=sea+otters&format=json"]


async def test_web_search_through_brave_sends_the_key_and_never_shows_it(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    write_config(web_services, {"web": {"searchProvider": "brave", "searchUrl": f"{fake_web.root}/brave"}})
    fake_openai.script(Reply(tool_calls=[ToolCallSpec("web_search", {"query": "otters"}, id="s1")]), "found")
    await say(web_services, channel, "1", "search otters")
    assert tool_results(fake_openai) == [
        "Results for 'otters':\n1. Brave hit\n   https://brave.example/1\n   token seen: [REDACTED]"
    ]
    assert fake_web.headers[0]["X-Subscription-Token"] == BRAVE_KEY


async def test_web_search_through_tavily_and_off_without_its_key(
    web_services: Application,
    channel: RecordingChannel,
    fake_openai: FakeOpenAI,
    fake_web: FakeWeb,
    tmp_path: Path,
) -> None:
    tavily = {"web": {"searchProvider": "tavily", "searchUrl": f"{fake_web.root}/tavily"}}
    write_config(web_services, tavily)
    await say(web_services, channel, "1", "hi")
    assert "web_search" not in offered(fake_openai)  # no TAVILY_API_KEY in this environment: off

    with_key = Application(env_for(tmp_path / "other", fake_openai, tavily_api_key="tvly-key-0001"))
    try:
        write_config(with_key, tavily)
        fake_openai.script(Reply(tool_calls=[ToolCallSpec("web_search", {"query": "otters"}, id="s1")]), "found")
        await say(with_key, channel, "2", "search otters")
        assert tool_results(fake_openai) == [
            "Results for 'otters':\n1. Tavily hit\n   https://tavily.example/1\n   for otters"
        ]
        assert fake_web.headers[-1]["Authorization"] == "Bearer tvly-key-0001"
    finally:
        await with_key.stop()


async def test_a_provider_that_fails_is_a_tool_error(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await search_through_a_searxng(web_services, channel, fake_openai, f"{fake_web.root}/nothing-here")
    assert result == "Error: SearXNG answered HTTP 404"


async def test_a_search_backend_that_is_down_or_set_up_without_json_is_said_to_the_model_and_the_log(
    web_services: Application,
    channel: RecordingChannel,
    fake_openai: FakeOpenAI,
    fake_web: FakeWeb,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # nothing listens there once the probe is closed
    down = await search_through_a_searxng(web_services, channel, fake_openai, f"http://127.0.0.1:{closed_port}")
    html_only = await search_through_a_searxng(web_services, channel, fake_openai, f"{fake_web.root}/searx-html-only")
    assert down.startswith("Error: the search provider could not be reached: ClientConnectorError: Cannot connect")
    assert f"127.0.0.1:{closed_port}" in down
    assert html_only == "Error: SearXNG answered HTTP 403 (is json among its search.formats?)"
    failures = [r.getMessage() for r in caplog.records if "web_search failed in" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].endswith(down.removeprefix("Error: ")) and failures[1].endswith(
        "chars: SearXNG answered HTTP 403 (is json among its search.formats?)"
    )


async def test_a_search_answer_of_another_shape_is_no_results_not_a_crash(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await search_through_a_searxng(web_services, channel, fake_openai, f"{fake_web.root}/searx-odd")
    assert result == "No results for 'otters'."


async def test_what_a_browser_never_shows_is_left_out_of_a_page_with_little_text(
    web_services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, fake_web: FakeWeb
) -> None:
    result = await fetch_through_the_bot(web_services, channel, fake_openai, f"{fake_web.root}/app-shell", LOCAL_ONLY)
    assert "# Opening hours" in result and "Monday to Friday, 9 to 18." in result
    for hidden in ("do-not-show", "display:none", "build 4711", "enable JavaScript", "pageProps", "a row not shown"):
        assert hidden not in result

"""`web_fetch`: a web page as readable Markdown.

Only http and https. Every address the bot connects to, the first and each redirect's, whether
written in the URL or resolved by DNS, must be a public one: loopback, private, link-local,
shared, reserved and multicast addresses are refused unless `web.allowPrivateAddresses` is on or
the host is one of `web.allowPrivateHosts` (the check runs in the connector's resolver, so the
address checked is the address connected to, and before any connection).
The download stops at `web.maxDownloadBytes`; the page's main content is found by readability
and converted to Markdown by markdownify; the result is cut to `web.maxResultChars`, visibly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import BaseModel, Field
from yarl import URL

from bot.settings import WebConfig
from bot.tools.registry import Tool, ToolContext, ToolError

log = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CHUNK_BYTES = 64 * 1024
# Content types read as text as they are; HTML is made readable first; anything else is refused.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/rss+xml")
_BLANK_LINES = re.compile(r"\n{3,}")
# What a browser never shows as text: scripts, styles, what stands in for scripts, templates, comments. Taken
# out before anything reads the page (markdownify would keep their text, a page's JSON and CSS with it).
_HIDDEN = re.compile(r"<(script|style|noscript|template)\b[^>]*>.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
# A NUL byte in this much of the start marks a body as binary, whatever its type says.
BINARY_SNIFF_BYTES = 8192
# How much of a body whose charset is not declared is read to guess it (the guess is slow on megabytes).
CHARSET_SNIFF_BYTES = 32 * 1024
# How much markup is converted first per character of Markdown wanted (more follows when it gave too little).
HTML_PER_MARKDOWN_CHAR = 4
# Below this much text the readability pick is taken to have missed, and the whole body is converted.
MIN_READABLE_CHARS = 200


class WebFetchArgs(BaseModel):
    url: str = Field(description="The http or https URL of the page")


class RefusedAddress(OSError):
    """The URL's host is, or resolves to, an address the configuration does not allow."""


def is_public(address: str) -> bool:
    """Whether `address` is a public unicast address (IPv4-mapped IPv6 judged by its IPv4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _literal_address(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


class PublicOnlyResolver(AbstractResolver):
    """Resolves as the system does, and refuses a host any of whose addresses is not public
    (but for the hosts the configuration names)."""

    def __init__(self, allowed_hosts: frozenset[str]) -> None:
        self._resolver = aiohttp.ThreadedResolver()
        self._allowed = allowed_hosts

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._resolver.resolve(host, port, family)
        if host.lower() in self._allowed:
            return results
        for result in results:
            if not is_public(result["host"]):
                raise RefusedAddress(f"{host} resolves to {result['host']}, a private or local address")
        return results

    async def close(self) -> None:
        await self._resolver.close()


@dataclass
class FetchedPage:
    url: str
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool


def allowed_hosts(config: WebConfig) -> frozenset[str]:
    return frozenset(host.lower().strip("[]") for host in config.allow_private_hosts)


def check_url(url: URL, config: WebConfig) -> None:
    """Refuse what is not http(s), and a host written as a non-public address (before any connection)."""
    if url.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be fetched, not {url.scheme or 'a relative URL'!r}")
    if not url.host:
        raise ToolError("the URL has no host")
    if config.allow_private_addresses or url.host.lower().strip("[]") in allowed_hosts(config):
        return
    literal = _literal_address(url.host)
    if literal is not None and not is_public(literal):
        raise ToolError(f"{url.host} is a private or local address; fetching it is not allowed")


async def fetch(url_text: str, config: WebConfig) -> FetchedPage:
    """Download `url_text`, following at most `maxRedirects` redirects, each checked like the first."""
    try:
        url = URL(url_text.strip())
    except ValueError as error:
        raise ToolError(f"not a valid URL: {error}") from error
    resolver: AbstractResolver = (
        aiohttp.ThreadedResolver() if config.allow_private_addresses else PublicOnlyResolver(allowed_hosts(config))
    )
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    timeout = aiohttp.ClientTimeout(total=config.fetch_timeout_seconds)
    headers = {"User-Agent": config.user_agent, "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        for _ in range(config.max_redirects + 1):
            check_url(url, config)
            try:
                async with session.get(url, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in REDIRECT_STATUSES and location:
                        url = url.join(URL(location))
                        continue
                    if response.status >= 400:
                        raise ToolError(f"{url} answered HTTP {response.status} {response.reason or ''}".rstrip())
                    body, truncated = await _read_limited(response, config.max_download_bytes)
                    return FetchedPage(str(url), response.content_type, response.charset, body, truncated)
            except aiohttp.ClientConnectorError as error:
                if isinstance(error.os_error, RefusedAddress) or isinstance(error.__cause__, RefusedAddress):
                    raise ToolError(f"{error.os_error}; fetching it is not allowed") from error
                raise ToolError(f"could not connect to {url.host}: {error.os_error}") from error
            except RefusedAddress as error:
                raise ToolError(f"{error}; fetching it is not allowed") from error
            except TimeoutError as error:
                raise ToolError(f"{url} did not answer within {config.fetch_timeout_seconds:.0f} s") from error
            except aiohttp.ClientError as error:
                raise ToolError(f"fetching {url} failed: {type(error).__name__}: {error}") from error
    raise ToolError(f"more than {config.max_redirects} redirects")


async def _read_limited(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


def to_markdown(page: FetchedPage, max_chars: int) -> tuple[str, str, bool]:
    """The page's title, its readable content as Markdown, and whether that is all of it: HTML is converted only
    as far as `max_chars` of Markdown can be shown (CPU work: run it in a thread)."""
    content_type = page.content_type.lower()
    readable = "html" in content_type or content_type.startswith(_TEXT_TYPES)
    if not readable:
        raise ToolError(
            f"{page.url} is {page.content_type or 'of an unknown type'}, not a page that can be read as text"
        )
    if b"\0" in page.body[:BINARY_SNIFF_BYTES]:  # no text has NUL bytes: a file served under a text type
        raise ToolError(f"{page.url} is binary data (sent as {page.content_type}), not a page that can be read as text")
    text = page_text(page)
    if "html" not in content_type:
        return "", text.strip(), True
    text = _HIDDEN.sub("", text)
    if not text.strip():
        return "", "", True
    from readability import Document  # lxml and readability load with the first page, not at start

    try:
        document = Document(text)
        title = (document.short_title() or "").strip()
        markdown, whole = _convert_within(document.summary(html_partial=True), max_chars)
    except Exception as error:  # lxml's parser errors on broken markup: the whole page stands in
        log.info("[ToolLoop] readability could not read %s (%s); converting the whole page", page.url, error)
        title, markdown, whole = "", "", True
    if len(markdown) < MIN_READABLE_CHARS:
        markdown, whole = _convert_within(text, max_chars)
    return title, markdown, whole


def _convert_within(html: str, max_chars: int) -> tuple[str, bool]:
    """The Markdown of as much of `html` as gives more than `max_chars` of it (all of it when that takes all),
    and whether it is all: markdownify's time grows with the markup, of which the model sees the start only.
    A start a few times the Markdown wanted is tried first, then four times as much, and so on."""
    size = max_chars * HTML_PER_MARKDOWN_CHAR
    while size < len(html):
        markdown = _convert(html[:size])  # a tag cut in two is read as far as it goes
        if len(markdown) > max_chars:
            return markdown, False
        size *= 4
    return _convert(html), True


def page_text(page: FetchedPage) -> str:
    """The body as text: in the charset the server declared when Python knows it, else in UTF-8 when it is
    that, else in the charset the page declares in a `<meta>` or reads best in (readability's guess, chardet)."""
    if page.charset:
        try:
            return page.body.decode(page.charset, errors="replace")
        except LookupError:
            log.info(
                "[ToolLoop] %s declares the unknown charset %r; reading it as it reads best", page.url, page.charset
            )
    try:
        return page.body.decode("utf-8")
    except UnicodeDecodeError as error:
        if page.truncated and error.start >= len(page.body) - 3:  # the cut split the last character
            return page.body.decode("utf-8", errors="replace")
    from readability.encoding import get_encoding

    try:
        return page.body.decode(get_encoding(page.body[:CHARSET_SNIFF_BYTES]), errors="replace")
    except LookupError:  # a <meta charset> Python does not know
        return page.body.decode("utf-8", errors="replace")


def _convert(html: str) -> str:
    from markdownify import markdownify

    try:
        markdown: Any = markdownify(html, heading_style="ATX", strip=["script", "style", "img"])
    except RecursionError:  # markup nested deeper than markdownify (or lxml) can walk: its text, without structure
        reader = _TextOnly()
        reader.feed(html)
        reader.close()
        markdown = "".join(reader.text)
    return _BLANK_LINES.sub("\n\n", str(markdown)).strip()


class _TextOnly(HTMLParser):
    """The text of markup, read tag by tag (no tree, so no depth limit), without scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("script", "style") and self._hidden > 0

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text.append(data)


def render(page: FetchedPage, title: str, markdown: str, max_chars: int, whole: bool = True) -> str:
    """The tool's result: title, source, the Markdown, and a visible note of anything cut (`whole`: the
    Markdown is all the page's, so what is cut can be counted)."""
    notes = []
    if page.truncated:
        notes.append(f"[The page was cut at {len(page.body)} bytes: web.maxDownloadBytes]")
    if len(markdown) > max_chars:
        left_out = f"{len(markdown) - max_chars} more characters" if whole else "the rest of the page"
        notes.append(f"[… {left_out} cut: web.maxResultChars]")
        markdown = markdown[:max_chars]
    if title and markdown.startswith(f"# {title}\n"):
        markdown = markdown[len(title) + 3 :].lstrip()  # the page's first heading is its title: not twice
    head = [f"# {title}" if title else "", f"Source: {page.url}"]
    markdown = markdown or "[The page has no readable text]"
    return "\n\n".join(part for part in [*head, markdown, *notes] if part)


def web_fetch_tool() -> Tool[WebFetchArgs]:
    async def web_fetch(args: WebFetchArgs, context: ToolContext) -> str:
        config = context.config.web
        page = await fetch(args.url, config)
        title, markdown, whole = await asyncio.to_thread(to_markdown, page, config.max_result_chars)
        log.info(
            "[ToolLoop] turn %s: web_fetch %s: %d bytes%s, %d chars of Markdown%s",
            context.turn_id, page.url, len(page.body), " (cut)" if page.truncated else "", len(markdown),
            "" if whole else " (of its start)",
        )  # fmt: skip
        return render(page, title, markdown, config.max_result_chars, whole)

    return Tool(
        "web_fetch",
        "Read a web page (http or https) as Markdown: its title and main text, with links.",
        WebFetchArgs,
        web_fetch,
    )

"""`HttpListener`: the bot's HTTP server on `BOT_LISTEN_HOST:BOT_LISTEN_PORT` (aiohttp).

It serves `/healthz` (JSON: channels, scheduler, last model call; 503 when something is down) and
`/metrics` (Prometheus text) from what it is given; channels add their routes (the Telegram webhook)
before it starts, because aiohttp freezes its routes once serving. It runs in webhook mode or when
`BOT_LISTEN_PORT` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

RouteHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The health report: whether all is well, and the details to show.
HealthReport = Callable[[], tuple[bool, dict[str, object]]]
MetricsReport = Callable[[], bytes]


class HttpListener:
    """An aiohttp application with `/healthz`, started and stopped with the bot."""

    def __init__(
        self, host: str, port: int, health: HealthReport | None = None, metrics: MetricsReport | None = None
    ) -> None:
        self.host = host
        self.port = port
        self._health = health
        self._metrics = metrics
        self._app = web.Application(client_max_size=8 * 1024 * 1024)
        self._app.router.add_get("/healthz", self._healthz)
        self._app.router.add_get("/metrics", self._serve_metrics)
        self._runner: web.AppRunner | None = None

    def add_route(self, method: str, path: str, handler: RouteHandler) -> None:
        """Serve `handler` at `path`; only before `start`."""
        self._app.router.add_route(method, path, handler)

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        # With port 0 the system picked one: report the real one.
        self.port = int(self._runner.addresses[0][1])
        log.info("[Http] Listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.StreamResponse:
        healthy, details = self._health() if self._health is not None else (True, {})
        return web.json_response({"status": "ok" if healthy else "degraded", **details}, status=200 if healthy else 503)

    async def _serve_metrics(self, _: web.Request) -> web.StreamResponse:
        if self._metrics is None:
            raise web.HTTPNotFound()
        return web.Response(body=self._metrics(), headers={"Content-Type": METRICS_CONTENT_TYPE})

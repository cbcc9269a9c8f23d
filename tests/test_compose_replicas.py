"""The compose file of replicas (`docs/compose/`): PostgreSQL with pgvector, two bot replicas in webhook mode,
Caddy in front. No Docker engine runs here, so what can be checked without one is: the file parses, every
variable it gives the bot is one the bot reads (and takes the value given), and the health checks ask the
path the bot's listener serves.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import yaml

from bot.http.listener import HttpListener
from bot.settings import EnvSettings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docs" / "compose"
REPLICAS = ["bot-1", "bot-2"]
# `${NAME:?message}` or `${NAME:-default}`: what compose puts in from .env (the default when .env has none).
_INTERPOLATED = re.compile(r"\$\{([A-Z_]+)(?::-([^}]*))?[^}]*\}")


def compose_file() -> dict[str, object]:
    loaded = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def replica_environment(name: str) -> dict[str, str]:
    """A replica's environment with each `${...}` filled in as compose would: the default where one is
    given, else the example value .env would hold."""
    service = compose_file()["services"][name]  # type: ignore[index]
    filled = {"BOT_DOMAIN": "bot.example.com", "POSTGRES_PASSWORD": "secret"}
    return {
        key: _INTERPOLATED.sub(
            lambda match: match[2] if match[2] is not None else filled.get(match[1], "x"), str(value)
        )
        for key, value in service["environment"].items()
    }


def test_the_compose_file_runs_postgresql_with_pgvector_two_webhook_replicas_and_a_proxy() -> None:
    services = compose_file()["services"]
    assert isinstance(services, dict)
    assert sorted(services) == ["bot-1", "bot-2", "db", "proxy"]
    assert services["db"]["image"].startswith("pgvector/pgvector:")
    environments = [replica_environment(name) for name in REPLICAS]
    assert environments[0] == environments[1]  # one database, one webhook URL and secret
    assert environments[0]["TELEGRAM_MODE"] == "webhook"
    assert urlsplit(environments[0]["BOT_DATABASE_URL"]).hostname == "db"
    # Each replica a workspace volume of its own.
    volumes = [services[name]["volumes"] for name in REPLICAS]
    assert volumes[0] != volumes[1] and all(v[0].endswith(":/data/workspace") for v in volumes)
    assert {name: services["proxy"]["depends_on"][name]["condition"] for name in REPLICAS} == {
        name: "service_healthy" for name in REPLICAS
    }


def test_every_variable_the_compose_file_gives_a_replica_is_one_the_bot_reads() -> None:
    known = {name.upper() for name in EnvSettings.model_fields}
    for name in REPLICAS:
        environment = replica_environment(name)
        assert sorted(set(environment) - known) == []
        # And each takes the value given (the mode, the URL's form, the port as a number).
        settings = EnvSettings(_env_file=None, **{key.lower(): value for key, value in environment.items()})  # type: ignore[arg-type]
        assert settings.telegram_mode == "webhook" and settings.bot_database_url is not None
        assert settings.bot_listen_port == 8080


async def test_the_health_checks_ask_the_path_the_bots_listener_serves() -> None:
    services = compose_file()["services"]
    assert isinstance(services, dict)
    environment = replica_environment("bot-1")
    command = " ".join(services["bot-1"]["healthcheck"]["test"])
    found = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]*)", command)
    assert found, command
    port, path = found[1], found[2]
    assert port == environment["BOT_LISTEN_PORT"]
    caddyfile = (COMPOSE / "Caddyfile").read_text()
    assert re.search(rf"^\s*health_uri {re.escape(path)}$", caddyfile, re.MULTILINE)
    upstreams = re.search(r"reverse_proxy (.+) \{", caddyfile)
    assert upstreams and upstreams[1].split() == [f"{name}:{port}" for name in REPLICAS]
    # The proxy passes the webhook's path, the one the replicas registered with Telegram.
    webhook_path = urlsplit(environment["TELEGRAM_WEBHOOK_URL"]).path
    assert re.search(rf"^\s*handle {re.escape(webhook_path)} \{{$", caddyfile, re.MULTILINE)

    listener = HttpListener("127.0.0.1", 0)
    await listener.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{listener.port}{path}") as response:
            assert response.status == 200
            assert (await response.json())["status"] == "ok"
    finally:
        await listener.stop()

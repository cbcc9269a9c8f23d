"""The checks of a setup, each one line: what was checked, what was found, and for a failure the fix.

`python -m bot doctor` runs them all; `python -m bot onboard` runs the ones that check an answer on the
spot (the Telegram token, the endpoint and key, the model); `/status` shows the owner the failures of the
ones that ask nothing of the network (`local_checks`), so both say the same thing about a setup.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import ValidationError

from bot.clock import InvalidTimezone, resolve_timezone
from bot.config_problems import InvalidJsonFile, read_settings_text
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.embedders import Embedders
from bot.llm.errors import LlmError, LlmFailure
from bot.llm.models import ModelRegistry, Tier
from bot.logging_setup import redact
from bot.memory.item_files import parse_item_file, read_raw
from bot.memory.long_term import not_text
from bot.runtime_config import InvalidRuntimeConfig, parse_runtime_config
from bot.sessions.store import session_from_json
from bot.settings import EnvSettings, RuntimeConfig
from bot.shipped import shipped_path
from bot.storage.files import read_text_sync
from bot.tools.mcp import McpManager, McpState
from bot.workspace import Workspace

# Below this much free space the workspace is reported full: a day's sessions, notes and vectors fit in far
# less, but a knowledge graph's rebuild or a week of voice notes does not.
MIN_FREE_BYTES = 200 * 1024 * 1024
# One network check waits at most this long; a setup that needs longer is reported unreachable.
NETWORK_TIMEOUT_SECONDS = 20.0
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class CheckResult:
    """One check: `fix` says what to change (naming the variable or key) when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        if self.ok:
            return f"✓ {self.name}: {self.detail}"
        stop = "" if self.detail.endswith(("?", ".")) else "."
        return f"✗ {self.name}: {self.detail}{stop} Fix: {self.fix}"


# The name of the runtime-config check's lines (`/status` lists refused keys on lines of its own).
CONFIG_CHECK = "runtime-config"


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, True, detail)


def failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, False, detail, fix)


# -- what needs no network ----------------------------------------------------------------------------


def check_environment(env: EnvSettings) -> list[CheckResult]:
    """The environment's values that pydantic cannot judge alone: the time zone, the key, the webhook."""
    results = []
    try:
        zone = resolve_timezone(env.bot_timezone)
        results.append(passed("Time zone", f"{zone} (BOT_TIMEZONE{'' if env.bot_timezone else ' unset: the machine'})"))
    except InvalidTimezone as error:
        results.append(failed("Time zone", str(error), "set BOT_TIMEZONE to an IANA name such as Europe/Berlin"))
    if env.openai_api_key is None and env.openai_base_url is None:
        results.append(
            failed(
                "Model key",
                "OPENAI_API_KEY is not set and OPENAI_BASE_URL is OpenAI's",
                "set OPENAI_API_KEY (in .env), or OPENAI_BASE_URL to an endpoint that needs no key",
            )
        )
    if env.telegram_bot_token is None:
        results.append(
            failed(
                "Telegram",
                "TELEGRAM_BOT_TOKEN is not set: only `python -m bot chat` can reach the bot",
                "set TELEGRAM_BOT_TOKEN to the token @BotFather gave (python -m bot onboard asks for it)",
            )
        )
    if env.telegram_mode == "webhook" and not env.telegram_webhook_url:
        results.append(
            failed(
                "Webhook",
                "TELEGRAM_MODE is webhook but TELEGRAM_WEBHOOK_URL is not set",
                "set TELEGRAM_WEBHOOK_URL to the public HTTPS URL that reaches BOT_LISTEN_PORT "
                "(or TELEGRAM_MODE=polling)",
            )
        )
    return results


def check_workspace(root: Path) -> CheckResult:
    """The workspace can be written (or created) and has room."""
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return failed("Workspace", f"{existing} is not a folder", "set BOT_WORKSPACE to a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".doctor-"):
            pass
    except OSError as error:
        return failed(
            "Workspace",
            f"{existing} cannot be written: {error.strerror or error}",
            f"give the bot's user write access to {existing}, or set BOT_WORKSPACE to a folder it can write",
        )
    free = shutil.disk_usage(existing).free
    where = str(root.resolve()) + ("" if root.exists() else " (created at the first start)")
    if free < MIN_FREE_BYTES:
        return failed(
            "Workspace",
            f"{where}: only {free // (1024 * 1024)} MB free",
            f"free space on that disk, or move BOT_WORKSPACE to a disk with {MIN_FREE_BYTES // (1024 * 1024)} MB free",
        )
    return passed("Workspace", f"{where}, writable, {free // (1024 * 1024 * 1024)} GB free")


def read_runtime_config(env: EnvSettings) -> tuple[RuntimeConfig, list[CheckResult]]:
    """The configuration the bot would run with, and whether the workspace's file was accepted: one line
    for the file, or one per refused key (the bot runs with the file's other keys)."""
    path = Workspace(env.bot_workspace).runtime_config_file
    defaults_path = shipped_path("config") / "runtime-config.json"
    defaults = json.loads(defaults_path.read_text(encoding="utf-8"))
    overrides = {"llm": {"model": env.bot_model}} if env.bot_model else None
    fallback = parse_runtime_config("{}", path, defaults, overrides).config
    try:
        loaded = parse_runtime_config(read_settings_text(path), path, defaults, overrides)
    except FileNotFoundError:
        return fallback, [passed(CONFIG_CHECK, f"{path} does not exist yet: the shipped defaults apply")]
    except InvalidRuntimeConfig as error:
        return fallback, [failed(CONFIG_CHECK, str(error), f"make {path} a valid JSON object")]
    except InvalidJsonFile as error:
        return fallback, [failed(CONFIG_CHECK, str(error), f"save {path} as UTF-8")]
    except OSError as error:
        return fallback, [failed(CONFIG_CHECK, f"{path} cannot be read: {error}", f"make {path} readable")]
    if not loaded.problems:
        return loaded.config, [passed(CONFIG_CHECK, f"{path} accepted")]
    return loaded.config, [
        failed(CONFIG_CHECK, f"{path}: {problem.describe()}", f"correct or remove `{problem.key}` in {path}")
        for problem in loaded.problems
    ]


def model_registry(env: EnvSettings) -> ModelRegistry:
    workspace = Workspace(env.bot_workspace)
    return ModelRegistry.load(shipped_path("config") / "models.json", workspace.models_file)


def check_model_window(env: EnvSettings, config: RuntimeConfig) -> list[CheckResult]:
    """The workspace's models.json is accepted (one line per entry refused) and the chat model is in it or the
    shipped one, so prompts are planned for its real window."""
    registry = model_registry(env)
    models_file = Workspace(env.bot_workspace).models_file
    refused = [failed("Model window", problem, f"correct it in {models_file}") for problem in registry.problems]
    spec = registry.lookup(config.llm.model)
    window = f"input {spec.max_input_tokens} / output {spec.max_output_tokens} tokens"
    if spec.known:
        return [*refused, passed("Model window", f"{spec.name}: {window}")]
    return [
        *refused,
        failed(
            "Model window",
            f"{spec.name} is not in models.json: prompts are planned for the default window ({window})",
            f'add {{"models": {{"{spec.name}": {{"maxInputTokens": N, "maxOutputTokens": M, "tier": "smart"}}}}}} '
            f"to {models_file}",
        ),
    ]


def local_checks(env: EnvSettings) -> list[CheckResult]:
    """The checks that ask nothing of the network: quick enough for every `/status`."""
    config, config_checks = read_runtime_config(env)
    return [
        *check_environment(env),
        check_workspace(env.bot_workspace),
        *config_checks,
        *check_model_window(env, config),
    ]


def check_memory_files(root: Path) -> list[CheckResult]:
    """What a hand edit can spoil in the memory files: a MEMORY.md that is not UTF-8 text, item lines that are not
    items. Every file is read (for `doctor`, not for each `/status`, which counts the skipped lines itself)."""
    memory = Workspace(root).memory_dir
    results: list[CheckResult] = []
    for path in sorted(memory.rglob("MEMORY.md")):
        try:
            problem = not_text(path.read_bytes())
        except OSError as error:
            problem = f"cannot be read: {error.strerror or error}"
        if problem is not None:
            results.append(failed("Memory files", f"{path}: {problem}", _memory_md_fix(problem, path)))
    item_files = sorted(memory.rglob("items/**/*.jsonl"))
    for path in item_files:
        parsed = parse_item_file(read_raw(path), path)
        if parsed.skipped_lines:
            said = "; ".join(f"line {number}: {reason}" for number, reason in parsed.skipped_lines)
            results.append(
                failed(
                    "Memory files",
                    f"{path}: skipped, kept in the file: {said}",
                    "correct or remove each line; the next message reads the file again",
                )
            )
    return results or [passed("Memory files", f"every MEMORY.md is text, {len(item_files)} item files hold only items")]


def _memory_md_fix(problem: str, path: Path) -> str:
    if "NUL bytes" in problem:
        return f"move {path} away and put your MEMORY.md back (from a backup, or `python -m bot memory edit`)"
    if "UTF-8" in problem:
        return f"open {path} in an editor and save it as UTF-8"
    return f"give the bot's user read access to {path}"


def check_sessions(root: Path) -> list[CheckResult]:
    """Every session file parses; one that does not is said with what the bot will do with it."""
    folder = Workspace(root).sessions_dir
    results: list[CheckResult] = []
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for path in files:
        try:
            session_from_json(read_text_sync(path) or "", str(path))
        except (OSError, ValidationError) as error:
            reason = error.strerror if isinstance(error, OSError) else error.errors()[0]["msg"]
            results.append(
                failed(
                    "Sessions",
                    f"{path} cannot be read ({reason})",
                    f"mend it by hand to keep that conversation; else at the chat's next message the bot keeps it "
                    f"aside as {path.name}.corrupt-<time>, starts the chat afresh and says so (its archive keeps "
                    "every message)",
                )
            )
    return results or [passed("Sessions", f"{len(files)} session files read")]


# -- what asks the network ----------------------------------------------------------------------------


def endpoint_of(env: EnvSettings) -> str:
    return (env.openai_base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")


async def check_model_call(api_key: str | None, base_url: str | None, model: str) -> list[CheckResult]:
    """A one-token completion: the endpoint reachable, the key accepted, the model served."""
    endpoint = (base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")
    client = LlmClient(api_key, base_url)
    request = ChatRequest(
        model,
        [{"role": "user", "content": "Reply with one word: ok"}],
        max_tokens=1,
        timeout_seconds=NETWORK_TIMEOUT_SECONDS,
        max_retries=0,
    )
    try:
        await client.complete(request)
    except LlmError as error:
        return [_model_failure(error, endpoint, model)]
    finally:
        await client.close()
    return [
        passed("Model endpoint", f"{endpoint} reachable"),
        passed("Model key", "accepted" if api_key else "none sent, none needed"),
        passed("Model", f"{model} answers"),
    ]


async def cheaper_extraction_model(
    api_key: str | None, base_url: str | None, chat_model: str, registry: ModelRegistry
) -> str | None:
    """A `fast` model (models.json's tier) the endpoint serves, to read exchanges into the knowledge graph
    for less than the chat model; None when the chat model is fast itself, or the endpoint offers none the
    bot knows (or does not list its models)."""
    if registry.lookup(chat_model).tier is Tier.FAST:
        return None
    client = LlmClient(api_key, base_url)
    try:
        served = await client.model_ids(NETWORK_TIMEOUT_SECONDS)
    except LlmError:
        return None
    finally:
        await client.close()
    fast = [name for name in served if registry.lookup(name).known and registry.lookup(name).tier is Tier.FAST]
    return fast[0] if fast else None


def _model_failure(error: LlmError, endpoint: str, model: str) -> CheckResult:
    if error.failure in (LlmFailure.UNREACHABLE, LlmFailure.TIMEOUT):
        return failed(
            "Model endpoint",
            f"{endpoint} cannot be reached ({error.detail})",
            "set OPENAI_BASE_URL to the endpoint's root (e.g. http://localhost:11434/v1 for Ollama)",
        )
    if error.failure is LlmFailure.AUTH:
        return failed(
            "Model key",
            f"{endpoint} refused the key ({error.detail})",
            "set OPENAI_API_KEY to a key this endpoint accepts",
        )
    if error.failure in (LlmFailure.BAD_REQUEST, LlmFailure.UNSUPPORTED):
        return failed(
            "Model",
            f"{endpoint} refused a call to {model} ({error.detail})",
            "set BOT_MODEL (or llm.model in runtime-config.json) to a model this endpoint serves",
        )
    return failed("Model", f"{model} did not answer ({error.detail})", "try again later, or check the endpoint")


async def check_embeddings(config: RuntimeConfig, api_key: str | None, base_url: str | None) -> list[CheckResult]:
    """Every embedding model the configuration names makes one vector: the offline one, or the endpoint's."""
    names = {
        "memory.embeddingsModel": config.memory.embeddings_model if config.memory.enabled else None,
        "rag.embeddingModel": config.rag.embedding_model if config.rag.enabled else None,
    }
    client = LlmClient(api_key, base_url)
    embedders = Embedders(client)
    results = []
    try:
        for name in sorted({model for model in names.values() if model}):
            keys = " and ".join(key for key, model in names.items() if model == name)
            embedder = embedders.get(name)
            assert embedder is not None
            try:
                [vector] = await asyncio.wait_for(embedder.embed(["a test sentence"]), NETWORK_TIMEOUT_SECONDS * 3)
            except (LlmError, OSError, ValueError, TimeoutError) as error:
                results.append(
                    failed(
                        "Embeddings",
                        f"{name} ({keys}) made no vector: {error}",
                        f'set {keys} to "local" (the offline model) or to an embedding model the endpoint serves',
                    )
                )
                continue
            label = "offline embedder loaded" if name == "local" else f"{name} answers"
            results.append(passed("Embeddings", f"{label} ({keys}), {len(vector)} dimensions"))
        if not results:
            results.append(passed("Embeddings", "none configured: memory retrieval is lexical"))
    finally:
        await client.close()
    return results


async def telegram_call(base_url: str, token: str, method: str) -> dict[str, object]:
    """One Bot API call; returns its JSON answer (`ok`, `result` or `description`)."""
    async with httpx.AsyncClient(timeout=NETWORK_TIMEOUT_SECONDS) as client:
        response = await client.post(f"{base_url.rstrip('/')}/bot{token}/{method}")
    answer = response.json()
    if not isinstance(answer, dict):
        raise ValueError(f"{method} answered {response.status_code} without a JSON object")
    return answer


async def check_telegram_token(base_url: str, token: str) -> tuple[CheckResult, str]:
    """`getMe` with `token`: the check, and the bot's username when Telegram accepted it (else "")."""
    if not token:
        return failed("Telegram token", "no token given", "create a bot with @BotFather, paste its token"), ""
    try:
        me = await telegram_call(base_url, token, "getMe")
    except (httpx.HTTPError, ValueError) as error:
        return failed(
            "Telegram token",
            f"{base_url} cannot be reached ({type(error).__name__})",
            "check the network, or TELEGRAM_API_BASE_URL if you run your own Bot API server",
        ), ""
    result = me.get("result")
    if not me.get("ok") or not isinstance(result, dict):
        return failed(
            "Telegram token",
            f"refused by Telegram ({me.get('description', 'no description')})",
            "set TELEGRAM_BOT_TOKEN to the token @BotFather gave (/mybots → API Token)",
        ), ""
    username = str(result.get("username", ""))
    return passed("Telegram token", f"@{username} (id {result.get('id')})"), username


async def check_telegram(env: EnvSettings) -> list[CheckResult]:
    """The token is accepted (getMe) and the webhook is as the mode wants it (getWebhookInfo)."""
    if env.telegram_bot_token is None:
        return []
    token = env.telegram_bot_token.get_secret_value()
    token_check, _ = await check_telegram_token(env.telegram_api_base_url, token)
    if not token_check.ok:
        return [token_check]
    results = [token_check]
    try:
        info = await telegram_call(env.telegram_api_base_url, token, "getWebhookInfo")
    except (httpx.HTTPError, ValueError) as error:
        return [*results, failed("Webhook", f"getWebhookInfo failed ({type(error).__name__})", "try again")]
    webhook = info.get("result") if isinstance(info.get("result"), dict) else {}
    assert isinstance(webhook, dict)
    url, last_error = webhook.get("url") or "", webhook.get("last_error_message")
    if env.telegram_mode == "polling":
        note = f"; the webhook {url} is removed at start" if url else ""
        results.append(passed("Webhook", f"polling mode{note}"))
    elif last_error:
        results.append(
            failed(
                "Webhook",
                f"Telegram's last delivery to {url} failed: {last_error}",
                "make TELEGRAM_WEBHOOK_URL reach the bot's listener (BOT_LISTEN_PORT) over HTTPS",
            )
        )
    else:
        shown = url or "none yet (registered at start)"
        results.append(passed("Webhook", f"{shown} for TELEGRAM_WEBHOOK_URL={env.telegram_webhook_url}"))
    return results


async def check_mcp_servers(config: RuntimeConfig) -> list[CheckResult]:
    """Each enabled MCP server starts and lists its tools within `mcp.startTimeoutSeconds`."""
    if not config.mcp.enabled or not any(not server.disabled for server in config.mcp_servers.values()):
        return []
    manager = McpManager(lambda: config)
    await manager.sync(config)
    deadline = asyncio.get_running_loop().time() + config.mcp.start_timeout_seconds + 1
    try:
        while asyncio.get_running_loop().time() < deadline:
            if all(status.state is not McpState.STARTING for status in manager.statuses()):
                break
            await asyncio.sleep(0.1)
        statuses = manager.statuses()
    finally:
        await manager.close()
    results = []
    for status in statuses:
        name = f"MCP server {status.name}"
        if status.state is McpState.READY:
            results.append(passed(name, f"started ({status.transport}), {status.tools} tools"))
        else:
            reason = status.last_error or f"not ready within {config.mcp.start_timeout_seconds:.0f} s"
            results.append(
                failed(name, reason, f"correct mcpServers.{status.name} in runtime-config.json (or disable it)")
            )
    return results


async def check_database(env: EnvSettings) -> list[CheckResult]:
    """`BOT_DATABASE_URL`, when set: the driver is installed and the server answers."""
    if not env.bot_database_url:  # unset, or set empty (as compose passes what .env leaves out)
        return []
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:
        return [
            failed(
                "Database",
                "BOT_DATABASE_URL is set but the PostgreSQL driver (asyncpg) is not installed",
                "pip install -e '.[postgres]' (or unset BOT_DATABASE_URL)",
            )
        ]
    try:
        connection = await asyncio.wait_for(
            asyncpg.connect(env.bot_database_url.get_secret_value()), NETWORK_TIMEOUT_SECONDS
        )
    except (OSError, TimeoutError, ValueError, asyncpg.PostgresError) as error:
        return [
            failed(
                "Database",
                f"no connection ({type(error).__name__}: {redact(str(error), env.secrets())})",
                "set BOT_DATABASE_URL to postgresql://USER:PASSWORD@HOST:PORT/DATABASE of a running server",
            )
        ]
    try:
        version = await connection.fetchval("SHOW server_version")
    finally:
        await connection.close()
    return [passed("Database", f"PostgreSQL {version} answers")]

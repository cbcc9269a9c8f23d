"""`python -m bot doctor`: every check of the setup `run` would start with, one line each, and the fixes.

Exit status 0 when every check passes, 1 otherwise. Nothing is written: the workspace is looked at, not
created, and the checks that ask the network (the model, the Telegram token, the embedders, MCP servers,
the database) ask as little as they can (a one-token completion, `getMe`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bot.logging_setup import redact
from bot.settings import EnvSettings
from bot.setup.checks import (
    CheckResult,
    check_database,
    check_embeddings,
    check_mcp_servers,
    check_memory_files,
    check_model_call,
    check_sessions,
    check_telegram,
    local_checks,
    read_runtime_config,
)


async def run_checks(env: EnvSettings) -> list[CheckResult]:
    """Every check, in the order a reader fixes them: the environment and files first, then the services."""
    config, _ = read_runtime_config(env)
    key = env.openai_api_key.get_secret_value() if env.openai_api_key else None
    results = [passed_environment(env), *local_checks(env)]
    results += [*check_memory_files(env.bot_workspace), *check_sessions(env.bot_workspace)]
    results += await check_model_call(key, env.openai_base_url, config.llm.model)
    results += await check_embeddings(config, key, env.openai_base_url)
    results += await check_telegram(env)
    results += await check_mcp_servers(config)
    results += await check_database(env)
    return results


def passed_environment(env: EnvSettings) -> CheckResult:
    """The environment was read: a value pydantic refused stops every command before this (exit 2)."""
    source = "the environment and .env" if _dotenv_read(env) else "the environment"
    return CheckResult("Environment", True, f"every value read from {source} is valid")


def _dotenv_read(env: EnvSettings) -> bool:
    env_file = env.model_config.get("env_file")
    return isinstance(env_file, str) and Path(env_file).is_file()


async def doctor(env: EnvSettings, out: Callable[[str], None] = print) -> int:
    """Print one line per check; 0 when all pass, 1 otherwise."""
    results = await run_checks(env)
    for result in results:
        out(redact(result.line(), env.secrets()))
    failures = sum(not result.ok for result in results)
    if failures:
        out(f"{failures} of {len(results)} checks failed.")
        return 1
    out(f"All {len(results)} checks passed. Start the bot with: python -m bot run")
    return 0

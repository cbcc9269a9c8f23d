"""`python -m bot onboard`: the first set-up, asked in the terminal or given as flags, each answer checked.

It asks for the Telegram token (checked with `getMe`), the model endpoint, key and model (checked with a
one-token completion, and the model's window looked up in models.json, asked for when unknown), the owner
(a Telegram user id, or a code they send to the bot, read here with `getUpdates`) and the time zone. Then it
writes `.env` (secrets, mode 0600; other lines of an existing file are kept) and the workspace (the owner in
`access.allowedUsers`, an unknown model's window in `preferences/models.json`), and says how to start.

With `--no-input` every answer comes from the flags (or the environment already set); a wrong one ends the
command with status 1 and the fix, and nothing is written.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import re
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from bot.clock import InvalidTimezone, resolve_timezone
from bot.config_problems import InvalidJsonFile, read_json_object, read_settings_text
from bot.runtime_config import deep_merge
from bot.settings import EnvSettings
from bot.setup.checks import (
    NETWORK_TIMEOUT_SECONDS,
    CheckResult,
    cheaper_extraction_model,
    check_model_call,
    check_telegram_token,
    model_registry,
)
from bot.setup.onboard_arguments import DEFAULT_MODEL
from bot.setup.workspace import prepare_workspace
from bot.storage.files import write_atomic_sync
from bot.workspace import Workspace

# How long onboarding waits for the owner's pairing message before it gives up.
PAIRING_WAIT_SECONDS = 300.0
PAIRING_CODE_LENGTH = 6
ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


class OnboardingFailed(Exception):
    """An answer given as a flag failed its check; the message says which and how to fix it."""


@dataclass
class Answers:
    """What onboarding found out; written only when every check passed."""

    telegram_token: str = ""
    bot_username: str = ""
    base_url: str = ""
    api_key: str = ""
    model: str = DEFAULT_MODEL
    model_window: int | None = None
    extraction_model: str | None = None
    owner_id: int | None = None
    timezone: str = ""
    workspace: str = "./workspace"


class Terminal:
    """The questions: asked in the terminal, or answered by the flags under `--no-input`."""

    def __init__(self, interactive: bool, out: Callable[[str], None] = print) -> None:
        self.interactive = interactive
        self.out = out

    def ask(self, question: str, given: str | None, default: str = "", secret: bool = False) -> str:
        if given is not None or not self.interactive:
            return given if given is not None else default
        shown = f" [{_masked(default) if secret else default}]" if default else ""
        prompt = f"{question}{shown}: "
        answer = getpass.getpass(prompt) if secret else input(prompt)
        return answer.strip() or default

    def failed(self, result: CheckResult) -> None:
        if not self.interactive:
            raise OnboardingFailed(result.line())
        self.out(result.line())


def _masked(secret: str) -> str:
    return secret[:4] + "…" if len(secret) > 8 else "…"


async def onboard(env: EnvSettings, args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    terminal = Terminal(interactive=not args.no_input and sys.stdin.isatty(), out=out)
    try:
        answers = await _ask_everything(env, args, terminal)
        _check_files_to_merge(answers)
    except OnboardingFailed as error:
        print(str(error), file=sys.stderr)
        print("Nothing was written.", file=sys.stderr)
        return 1
    except (EOFError, KeyboardInterrupt):
        print("\nOnboarding stopped: nothing was written.", file=sys.stderr)
        return 1
    env_file = Path(args.env_file)
    _write_env_file(env_file, answers)
    workspace_root = _write_workspace(answers)
    out(f"Wrote {env_file} (mode 0600) and the workspace at {workspace_root}.")
    out("Start the bot:  python -m bot run      (check the setup any time: python -m bot doctor)")
    out(f"Then talk to it: https://t.me/{answers.bot_username} (send /help for its commands).")
    return 0


async def _ask_everything(env: EnvSettings, args: argparse.Namespace, terminal: Terminal) -> Answers:
    answers = Answers(workspace=args.workspace or str(env.bot_workspace))
    await _ask_telegram(env, args, terminal, answers)
    await _ask_model(env, args, terminal, answers)
    await _ask_extraction_model(args, terminal, answers)
    await _ask_owner(env, args, terminal, answers)
    _ask_timezone(env, args, terminal, answers)
    return answers


async def _ask_telegram(env: EnvSettings, args: argparse.Namespace, terminal: Terminal, answers: Answers) -> None:
    current = env.telegram_bot_token.get_secret_value() if env.telegram_bot_token else ""
    given = args.telegram_token
    while True:
        token = terminal.ask("Telegram bot token (from @BotFather)", given, current, secret=True)
        given = None
        check, username = await check_telegram_token(env.telegram_api_base_url, token)
        if check.ok:
            answers.telegram_token, answers.bot_username = token, username
            terminal.out(check.line())
            return
        terminal.failed(check)


async def _ask_model(env: EnvSettings, args: argparse.Namespace, terminal: Terminal, answers: Answers) -> None:
    base_url = terminal.ask("Model endpoint (empty for OpenAI)", args.base_url, env.openai_base_url or "")
    current_key = env.openai_api_key.get_secret_value() if env.openai_api_key else ""
    key = terminal.ask("API key of the endpoint", args.api_key, current_key, secret=True)
    model = terminal.ask("Chat model", args.model, env.bot_model or DEFAULT_MODEL)
    while True:
        results = await check_model_call(key or None, base_url or None, model)
        problem = next((result for result in results if not result.ok), None)
        if problem is None:
            break
        terminal.failed(problem)
        if problem.name == "Model endpoint":
            base_url = terminal.ask("Model endpoint (empty for OpenAI)", None, base_url)
        elif problem.name == "Model key":
            key = terminal.ask("API key of the endpoint", None, "", secret=True)
        else:
            model = terminal.ask("Chat model", None, model)
    terminal.out(f"✓ Model: {model} answers at {base_url or 'OpenAI'}")
    answers.base_url, answers.api_key, answers.model = base_url, key, model
    spec = model_registry(EnvSettings(bot_workspace=Path(answers.workspace))).lookup(model)
    if spec.known:
        terminal.out(f"✓ Model window: input {spec.max_input_tokens} / output {spec.max_output_tokens} tokens")
        return
    given = str(args.model_window) if args.model_window else None
    while True:
        text = terminal.ask(f"{model} is not in models.json: its input window in tokens", given, "8192")
        given = None
        if text.isdigit() and int(text) >= 1024:
            answers.model_window = int(text)
            terminal.out(f"✓ Model window: input {text} tokens (written to preferences/models.json)")
            return
        terminal.failed(
            CheckResult("Model window", False, f"{text!r} is not a number of tokens", "give a whole number ≥ 1024")
        )


async def _ask_extraction_model(args: argparse.Namespace, terminal: Terminal, answers: Answers) -> None:
    """The model that reads each stretch of conversation into the knowledge graph (`rag.extractionModel`):
    a model call per stretch, so the cheapest that does the job; offered when the endpoint serves one."""
    chosen: str | None = args.extraction_model
    if chosen is None:
        registry = model_registry(EnvSettings(bot_workspace=Path(answers.workspace)))
        offered = await cheaper_extraction_model(
            answers.api_key or None, answers.base_url or None, answers.model, registry
        )
        if offered is None:
            terminal.out(
                f"✓ Knowledge graph: read by {answers.model} (the endpoint offers no cheaper model the bot knows)"
            )
            return
        reply = terminal.ask(
            f"Read conversations into the knowledge graph with {offered}, cheaper than {answers.model}? (y/n)",
            None,
            "y",
        )
        if reply.lower() not in ("y", "yes"):
            terminal.out(f"✓ Knowledge graph: read by {answers.model}")
            return
        chosen = offered
    problem = next(
        (
            result
            for result in await check_model_call(answers.api_key or None, answers.base_url or None, chosen)
            if not result.ok
        ),
        None,
    )
    if problem is not None:
        terminal.failed(problem)  # with flags: stops here, nothing written
        terminal.out(f"✓ Knowledge graph: read by {answers.model}")
        return
    answers.extraction_model = chosen
    terminal.out(f"✓ Knowledge graph: read by {chosen} (rag.extractionModel)")


async def _ask_owner(env: EnvSettings, args: argparse.Namespace, terminal: Terminal, answers: Answers) -> None:
    if args.owner_id is not None:
        answers.owner_id = args.owner_id
        return
    if not args.pair:
        if not terminal.interactive:
            raise OnboardingFailed("✗ Owner: not given. Fix: pass --owner-id ID (your Telegram user id) or --pair")
        text = terminal.ask("Your Telegram user id (a number; Enter to pair by sending the bot a code)", None, "")
        if text.lstrip("-").isdigit():
            answers.owner_id = int(text)
            terminal.out(f"✓ Owner: Telegram user {answers.owner_id}")
            return
    code = "".join(secrets.choice("0123456789") for _ in range(PAIRING_CODE_LENGTH))
    terminal.out(f"Send this code to @{answers.bot_username} on Telegram now: {code}")
    owner = await _wait_for_code(env.telegram_api_base_url, answers.telegram_token, code)
    if owner is None:
        raise OnboardingFailed(
            f"✗ Owner: no message with the code reached the bot within {PAIRING_WAIT_SECONDS:.0f} s. "
            "Fix: run onboard again, or give --owner-id"
        )
    answers.owner_id, name = owner
    terminal.out(f"✓ Owner: {name} (Telegram user {answers.owner_id})")


async def _wait_for_code(base_url: str, token: str, code: str) -> tuple[int, str] | None:
    """The sender of the first private message holding `code`, read with getUpdates (the bot is not running)."""
    deadline = asyncio.get_running_loop().time() + PAIRING_WAIT_SECONDS
    offset = 0
    async with httpx.AsyncClient(timeout=NETWORK_TIMEOUT_SECONDS + 30) as client:
        while asyncio.get_running_loop().time() < deadline:
            response = await client.post(
                f"{base_url.rstrip('/')}/bot{token}/getUpdates", json={"offset": offset, "timeout": 10}
            )
            answer = response.json()
            for update in answer.get("result", []) if answer.get("ok") else []:
                offset = max(offset, int(update["update_id"]) + 1)
                message = update.get("message") or {}
                sender = message.get("from") or {}
                if code in str(message.get("text", "")) and "id" in sender:
                    name = f"@{sender['username']}" if sender.get("username") else sender.get("first_name", "")
                    # Acknowledge what was read, so the bot does not answer the code once it starts.
                    await client.post(f"{base_url.rstrip('/')}/bot{token}/getUpdates", json={"offset": offset})
                    return int(sender["id"]), str(name)
            if not answer.get("ok"):
                await asyncio.sleep(1)
    return None


def _ask_timezone(env: EnvSettings, args: argparse.Namespace, terminal: Terminal, answers: Answers) -> None:
    machine = str(resolve_timezone(None))
    given = args.timezone
    while True:
        zone = terminal.ask("Time zone", given, env.bot_timezone or machine)
        given = None
        try:
            resolve_timezone(zone)
        except InvalidTimezone as error:
            terminal.failed(CheckResult("Time zone", False, str(error), "give an IANA name such as Europe/Berlin"))
            continue
        answers.timezone = zone
        return


def _write_env_file(path: Path, answers: Answers) -> None:
    values = {
        "TELEGRAM_BOT_TOKEN": answers.telegram_token,
        "OPENAI_BASE_URL": answers.base_url,
        "OPENAI_API_KEY": answers.api_key,
        "BOT_MODEL": answers.model,
        "BOT_TIMEZONE": answers.timezone,
        "BOT_WORKSPACE": answers.workspace,
    }
    kept = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            match = ENV_LINE.match(line)
            if not (match and match.group(1) in values):
                kept.append(line)
    written = [f"{name}={json.dumps(value)}" for name, value in values.items() if value]
    text = "\n".join([*kept, *written]) + "\n"
    write_atomic_sync(path, text.encode("utf-8"))
    path.chmod(0o600)


def _write_workspace(answers: Answers) -> Path:
    env = EnvSettings(bot_workspace=Path(answers.workspace), telegram_bot_token=SecretStr(answers.telegram_token))
    workspace = prepare_workspace(env)
    if answers.owner_id is not None:
        _merge_json(workspace.runtime_config_file, {"access": {"allowedUsers": [answers.owner_id]}})
    if answers.extraction_model is not None:
        _merge_json(workspace.runtime_config_file, {"rag": {"extractionModel": answers.extraction_model}})
    if answers.model_window is not None:
        entry = {"maxInputTokens": answers.model_window, "maxOutputTokens": min(4096, answers.model_window // 4)}
        _merge_json(workspace.models_file, {"models": {answers.model: {**entry, "tier": "smart"}}})
    return workspace.root.resolve()


def _check_files_to_merge(answers: Answers) -> None:
    """The workspace's files the answers are merged into can be read as JSON objects: a hand edit's slip in one is
    named before anything is written, never written over."""
    workspace = Workspace(Path(answers.workspace))
    _existing_json(workspace.runtime_config_file, "runtime-config")
    _existing_json(workspace.models_file, "models.json")


def _existing_json(path: Path, name: str) -> dict[str, Any]:
    """The object a file holds, {} when there is none; `OnboardingFailed` when it cannot be read as one."""
    try:
        return read_json_object(read_settings_text(path), path)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise OnboardingFailed(f"✗ {name}: {path} cannot be read ({error}). Fix: make it readable UTF-8") from error
    except InvalidJsonFile as error:
        fix = "correct it (or move it away), then run onboard again"
        raise OnboardingFailed(f"✗ {name}: {error}. Fix: {fix}") from error


def _merge_json(path: Path, changes: dict[str, Any]) -> None:
    merged = deep_merge(_existing_json(path, path.name), changes)
    write_atomic_sync(path, (json.dumps(merged, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))

"""Log configuration: one line per event, stage prefixes in the messages, secrets scrubbed.

Secrets are scrubbed when a log record is made (a log-record factory), not by one handler's filter,
so every handler gets the scrubbed text: the stderr handler, a library's own, a test's capture.
An uncaught exception is logged too, so its traceback is scrubbed like any other line.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

REDACTED = "[REDACTED]"
# Shorter values would scrub ordinary words; no real token or key is this short.
MIN_SECRET_CHARS = 4
# Libraries that log request URLs (Telegram puts the bot token in the URL) stay at WARNING.
CHATTY_LIBRARIES = (
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "telegram",
    "aiogram",
    "apscheduler",
    "aiohttp.access",
)


# A log file (the terminal chat's) is rotated at this size, keeping this many older files.
LOG_FILE_MAX_BYTES = 5 * 1024 * 1024
LOG_FILE_BACKUPS = 2

# Environment variables whose names say they hold a secret (`AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`, ...).
_SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:$|_)", re.IGNORECASE)
# Their values are scrubbed only from this length on, so a flag (`true`, `1`) scrubs no ordinary word.
MIN_ENVIRONMENT_SECRET_CHARS = 8


def secrets_in_environment(environ: Mapping[str, str]) -> list[str]:
    """The values of the environment variables whose names say they are secrets."""
    return [
        value
        for name, value in environ.items()
        if _SECRET_NAME.search(name) and len(value) >= MIN_ENVIRONMENT_SECRET_CHARS
    ]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by `[REDACTED]`."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return text


class SecretScrubbingRecordFactory:
    """Makes log records as the factory it wraps does, then replaces every known secret in their text."""

    def __init__(self, base: Callable[..., logging.LogRecord], secrets: list[str]) -> None:
        self.base = base
        self.secrets = [secret for secret in secrets if len(secret) >= MIN_SECRET_CHARS]

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.base(*args, **kwargs)
        if self.secrets:
            self._scrub(record)
        return record

    def _scrub(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return  # a broken format string: the handler reports it, with nothing formatted to leak
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        # Frozen as text whether or not a secret is in it now: a library may change an argument after
        # logging it (python-telegram-bot turns a logged getFile result's file_path into the file URL,
        # which holds the token), and the handler would format the changed value.
        record.msg, record.args = redact(message, self.secrets), None
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)


def add_secrets(secrets: Iterable[str]) -> None:
    """Scrub these too from now on (values taken from the environment after start, e.g. by an MCP server's config)."""
    factory = logging.getLogRecordFactory()
    if isinstance(factory, SecretScrubbingRecordFactory):
        known = set(factory.secrets)
        factory.secrets += [s for s in secrets if len(s) >= MIN_SECRET_CHARS and s not in known]


def configure_logging(
    level: str, secrets: list[str], stream: TextIO | None = None, log_file: Path | None = None
) -> None:
    """Log to `stream` (stderr) at `level`, with `secrets` scrubbed from every record and uncaught exception.
    With `log_file` (the terminal chat), lines go to that file instead, rotated, and only a fatal error to
    `stream` as well: the screen is the conversation's. `OSError` when the file cannot be made."""
    factory = logging.getLogRecordFactory()
    base = factory.base if isinstance(factory, SecretScrubbingRecordFactory) else factory
    logging.setLogRecordFactory(SecretScrubbingRecordFactory(base, secrets))
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler: logging.Handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    handlers = [handler]
    if log_file is not None:
        log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        to_file = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=LOG_FILE_MAX_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
        )
        to_file.setFormatter(formatter)
        handler.setLevel(logging.CRITICAL)
        handlers = [to_file, handler]
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level.upper())
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    sys.excepthook = _log_uncaught


def _log_uncaught(kind: type[BaseException], error: BaseException, traceback: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, traceback)
        return
    logging.getLogger("bot").critical("[App] Stopped by an unexpected error", exc_info=(kind, error, traceback))

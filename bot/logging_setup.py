"""Log configuration: one line per event, stage prefixes in the messages, secrets scrubbed."""

from __future__ import annotations

import logging
import sys

REDACTED = "[REDACTED]"
# Libraries that log request URLs (Telegram puts the bot token in the URL) stay at WARNING.
_CHATTY_LIBRARIES = (
    "httpx",
    "httpx2",
    "httpcore",
    "openai",
    "telegram",
    "aiogram",
    "apscheduler",
    "aiohttp.access",
)


class SecretRedactingFilter(logging.Filter):
    """Replaces every known secret in a record's final text, whatever logged it."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = [secret for secret in secrets if len(secret) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        exc_text = record.exc_text or ""
        if any(secret in message or secret in exc_text for secret in self._secrets):
            for secret in self._secrets:
                message = message.replace(secret, REDACTED)
                exc_text = exc_text.replace(secret, REDACTED)
            record.msg, record.args, record.exc_text = message, None, exc_text or None
        return True


def configure_logging(level: str, secrets: list[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(SecretRedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))

"""`LearnedWindows`: the real context window of a model on an endpoint, learned from what the provider does.

The model registry says what a model's window should be; the endpoint serving it may give less (a local
server started with a small context, a router's smaller variant). The bot learns the real figure two
ways: from a refusal that states it (`window_from_refusal` reads the texts providers send), and from a
provider that does not refuse but silently drops the start of a prompt too long for it, which shows in
its usage: the prompt tokens it reports are well under what was sent (`SILENT_CUT`). The figure is kept
per endpoint and model in the workspace (`state/model-windows.json`), read at start, and the registry
plans every prompt for it from then on. Each new figure is logged once and told to the owner once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot.storage.files import read_state_sync, write_atomic_sync

log = logging.getLogger(__name__)

# How a window was learned (in the file, in /status and in the notice).
REFUSAL = "refusal"
SILENT_CUT = "silent cut"
# The endpoint of the openai library's default base URL, when OPENAI_BASE_URL is not set.
DEFAULT_ENDPOINT = "https://api.openai.com/v1"
# Tells the owner once per key: `OwnerNotices.tell_once`.
TellOnce = Callable[[str, str], None]

# The limit as providers state it, most specific first; each pattern's one group is the window in tokens.
_REFUSAL_LIMITS = (
    # Anthropic (and routers passing it on): "prompt is too long: 208310 tokens > 200000 maximum".
    re.compile(r"prompt is too long:\s*[\d,]+\s*tokens\s*>\s*([\d,]+)\s*maximum", re.IGNORECASE),
    # llama.cpp server: the error object carries "n_ctx": 8192 (older builds: "(n_ctx = 4096)").
    re.compile(r"""n_ctx['"]?\s*[:=]\s*([\d,]+)""", re.IGNORECASE),
    # OpenAI, vLLM, OpenRouter, Groq, DeepSeek: "... maximum context length is 6000 tokens".
    re.compile(r"maximum context length is\s*([\d,]+)\s*tokens", re.IGNORECASE),
    # OpenAI's newer models: "Input tokens exceed the configured limit of 272000 tokens".
    re.compile(r"exceed the configured limit of\s*([\d,]+)\s*tokens", re.IGNORECASE),
    # vLLM's prompt check: "... is longer than the maximum model length of 4096".
    re.compile(r"longer than the maximum model length of\s*([\d,]+)", re.IGNORECASE),
    # Mistral: "Prompt contains 40000 tokens ..., too large for model with 32768 maximum context length".
    re.compile(r"too large for model with\s*([\d,]+)\s*maximum context length", re.IGNORECASE),
    # llama-cpp-python and LM Studio: "exceed context window of 2048", "context length of only 4096 tokens".
    re.compile(r"exceed context window of\s*([\d,]+)", re.IGNORECASE),
    re.compile(r"context length of only\s*([\d,]+)\s*tokens", re.IGNORECASE),
)
# Below this a stated figure is not a model's window but something else in the text (a count of messages).
MIN_WINDOW_TOKENS = 256


def window_from_refusal(text: str) -> int | None:
    """The window a provider's context-length refusal states, in tokens; None when it states none."""
    for pattern in _REFUSAL_LIMITS:
        match = pattern.search(text)
        if match is not None:
            tokens = int(match.group(1).replace(",", ""))
            return tokens if tokens >= MIN_WINDOW_TOKENS else None
    return None


@dataclass(frozen=True)
class LearnedWindow:
    """A model's window on one endpoint as learned: its tokens, how, and when."""

    tokens: int
    how: str
    learned_at: str


class LearnedWindows:
    """The learned windows of the models on one endpoint, kept in the workspace."""

    def __init__(self, file: Path, endpoint: str | None, tell_once: TellOnce | None = None) -> None:
        self._file = file
        self._endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self._tell_once = tell_once
        self._all = _read(file)

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def get(self, model: str) -> LearnedWindow | None:
        return self._all.get(self._endpoint, {}).get(model)

    def learn(self, model: str, tokens: int, how: str, believed: int, evidence: str = "") -> bool:
        """Keep `tokens` as `model`'s window when it is under what the bot believed (`believed`); True when
        it is new, so that the caller plans again. A figure at or above the belief teaches nothing.
        `evidence` ends the one log line (what showed it)."""
        tokens = max(tokens, MIN_WINDOW_TOKENS)
        if tokens >= believed:
            return False
        learned = LearnedWindow(tokens, how, datetime.now(UTC).isoformat(timespec="seconds"))
        self._all.setdefault(self._endpoint, {})[model] = learned
        self._write()
        log.warning(
            "[Context] %s at %s has a window of %d tokens (learned from a %s), not %d: every prompt is planned for "
            "it%s", model, self._endpoint, tokens, how, believed, f"; {evidence}" if evidence else "",
        )  # fmt: skip
        if self._tell_once is not None:
            self._tell_once(
                f"window:{self._endpoint}:{model}",
                f"The model {model} at {self._endpoint} takes at most {tokens:,} tokens (learned from a {how}), "
                f"not the {believed:,} I assumed. I now plan every message for that size: older parts of the "
                "conversation are summarised sooner, and less memory goes into each prompt. /status shows it.",
            )
        return True

    def _write(self) -> None:
        data = {
            endpoint: {
                model: {"tokens": window.tokens, "how": window.how, "learnedAt": window.learned_at}
                for model, window in models.items()
            }
            for endpoint, models in self._all.items()
        }
        try:
            write_atomic_sync(self._file, json.dumps(data, indent=1, sort_keys=True).encode())
        except OSError as error:
            log.warning("[Context] Could not keep %s (learned again after a restart): %s", self._file, error)


def _read(file: Path) -> dict[str, dict[str, LearnedWindow]]:
    data = read_state_sync(file, "Context", "the windows are learned again")
    windows: dict[str, dict[str, LearnedWindow]] = {}
    for endpoint, models in data.items():
        for model, entry in models.items() if isinstance(models, dict) else []:
            tokens = entry.get("tokens") if isinstance(entry, dict) else None
            if type(tokens) is int and tokens >= MIN_WINDOW_TOKENS:
                learned = LearnedWindow(tokens, str(entry.get("how", REFUSAL)), str(entry.get("learnedAt", "")))
                windows.setdefault(str(endpoint), {})[str(model)] = learned
    return windows

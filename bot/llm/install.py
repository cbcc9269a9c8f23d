"""What the llm package gives the rest of the bot: the model client, the model registry and the embedders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from pydantic import SecretStr

from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.llm.models import ModelRegistry
from bot.llm.spending import TokenSpending
from bot.llm.windows import LearnedWindows, TellOnce
from bot.metrics import BotMetrics


@dataclass(frozen=True)
class ModelAccess:
    """The one model client of the process, what each model can do, and the embedding models."""

    client: LlmClient
    models: ModelRegistry
    embedders: Embedders


def install(
    api_key: SecretStr | None,
    base_url: str | None,
    shipped_models: Path,
    workspace_models: Path,
    metrics: BotMetrics,
    spending_file: Path,
    today: Callable[[], date],
    chars_per_token: Callable[[str], float],
    windows_file: Path,
    tell_once: TellOnce,
) -> ModelAccess:
    spending = TokenSpending(spending_file, today, chars_per_token)
    metrics.watch_spending(spending.by_period)
    key = api_key.get_secret_value() if api_key else None
    client = LlmClient(key, base_url, metrics, spending=spending)
    # The windows learned from this endpoint (a refusal, a silent cut) override the registry's.
    models = ModelRegistry.load(shipped_models, workspace_models, LearnedWindows(windows_file, base_url, tell_once))
    # One offline embedding model serves memory and the knowledge graph alike.
    return ModelAccess(client, models, Embedders(client))

"""What the llm package gives the rest of the bot: the model client, the model registry and the embedders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.llm.models import ModelRegistry
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
    windows_file: Path | None = None,
    tell_once: TellOnce | None = None,
) -> ModelAccess:
    client = LlmClient(api_key.get_secret_value() if api_key else None, base_url, metrics)
    # The windows learned from this endpoint (a refusal, a silent cut) override the registry's.
    windows = LearnedWindows(windows_file, base_url, tell_once) if windows_file is not None else None
    models = ModelRegistry.load(shipped_models, workspace_models, windows)
    # One offline embedding model serves memory and the knowledge graph alike.
    return ModelAccess(client, models, Embedders(client))

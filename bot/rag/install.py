"""What the RAG package gives the rest of the bot: the knowledge graph service (with `rag_query`
registered) and the reader of documents sent in a chat."""

from __future__ import annotations

from dataclasses import dataclass

from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.database.connection import Database
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.llm.models import ModelRegistry
from bot.rag.factory import build_rag_service
from bot.rag.service import RagService
from bot.rag.tool import rag_query_tool
from bot.rag.upload_records import UploadFile, UploadRecords
from bot.rag.upload_table import UploadTable
from bot.rag.uploads import DocumentReader
from bot.runtime_config import RuntimeConfigStore
from bot.settings import EnvSettings
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace


@dataclass(frozen=True)
class InstalledRag:
    """The knowledge graph over past conversations, and what reads documents into it."""

    service: RagService
    documents: DocumentReader

    async def forget_messages(self, message_ids: list[str]) -> None:
        """Take out of the graph the documents made from these messages (memory forgot an item of theirs)."""
        await self.service.forget_documents(await self.service.documents_for_messages(message_ids))


def install(
    env: EnvSettings,
    workspace: Workspace,
    clock: Clock,
    llm: LlmClient,
    estimator: TokenEstimator,
    embedders: Embedders,
    config_store: RuntimeConfigStore,
    tools: ToolRegistry,
    models: ModelRegistry | None = None,
    database: Database | None = None,
) -> InstalledRag:
    service = build_rag_service(workspace, env, llm, config_store, estimator, embedders, models, database)
    tools.register(rag_query_tool(service))
    # Kept where the knowledge graph's journal is: with a database, every replica's uploads are every other's.
    records: UploadRecords = UploadFile(workspace.uploads_file) if database is None else UploadTable(database)
    return InstalledRag(service, DocumentReader(service, records, config_store.in_force, clock))

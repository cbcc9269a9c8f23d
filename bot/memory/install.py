"""What the memory package gives the rest of the bot: the memory service (with its tools registered) and
the sink that hands compacted turns to structured memory first."""

from __future__ import annotations

from dataclasses import dataclass

from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedders
from bot.memory.compaction_sink import PreCompactionMemory
from bot.memory.documents import DocumentsInDatabase
from bot.memory.scopes import ItemsInDatabase
from bot.memory.service import MemoryService
from bot.memory.tools import MemoryToolSource
from bot.notices import OwnerNotices
from bot.runtime_config import RuntimeConfigStore
from bot.storage.durability import DeferredSync
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace


@dataclass(frozen=True)
class InstalledMemory:
    """The memory service, and what compaction hands its messages to before they leave a session."""

    service: MemoryService
    pre_compaction: PreCompactionMemory


def install(
    workspace: Workspace,
    clock: Clock,
    llm: LlmClient,
    estimator: TokenEstimator,
    embedders: Embedders,
    config_store: RuntimeConfigStore,
    tools: ToolRegistry,
    deferred: DeferredSync,
    notices: OwnerNotices | None = None,
    documents_in_database: DocumentsInDatabase | None = None,
    items_in_database: ItemsInDatabase | None = None,
) -> InstalledMemory:
    service = MemoryService(
        workspace,
        clock,
        llm,
        estimator,
        embedders,
        deferred,
        notices,
        lambda: config_store.in_force().access.allowed_users,
        documents_in_database,
        items_in_database,
    )
    tools.add_source(MemoryToolSource(service, config_store.in_force))
    return InstalledMemory(service, PreCompactionMemory(service, config_store))

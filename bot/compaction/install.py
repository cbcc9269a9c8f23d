"""What the compaction package gives the rest of the bot: the compaction service (fed to structured
memory first) and the `search_history` tool over every chat's archive."""

from __future__ import annotations

from bot.compaction.history_search import HistorySearch, search_history_tool
from bot.compaction.service import CompactionService, PreCompactionSink
from bot.compaction.summarizer import Summarizer
from bot.context.planner import ContextPlanner
from bot.llm.client import LlmClient
from bot.llm.models import ModelRegistry
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService
from bot.tools.registry import ToolRegistry


def install(
    sessions: SessionService,
    llm: LlmClient,
    models: ModelRegistry,
    planner: ContextPlanner,
    config_store: RuntimeConfigStore,
    pre_compaction: PreCompactionSink,
    tools: ToolRegistry,
) -> CompactionService:
    tools.register(search_history_tool(HistorySearch(sessions)))
    return CompactionService(sessions, Summarizer(llm, models, planner), planner, config_store, pre_compaction)

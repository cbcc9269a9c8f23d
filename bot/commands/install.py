"""What the commands package gives the rest of the bot: the slash commands registered in the app's
`CommandRegistry`, and the `StatusReporter` that `/status` and `python -m bot status` print."""

from __future__ import annotations

from collections.abc import Callable

from bot.clock import Clock
from bot.commands.basic import register_basic_commands
from bot.commands.compaction import register_compaction_commands
from bot.commands.conversation import AnswerAgain, ForgetExchange, register_conversation_commands
from bot.commands.docs import register_docs_command
from bot.commands.memory import register_memory_commands
from bot.commands.model import ModelSwitch, register_model_command
from bot.commands.registry import CommandRegistry
from bot.commands.skills import register_skill_command
from bot.commands.status import StatusReporter
from bot.compaction.service import CompactionService
from bot.context.planner import ContextPlanner
from bot.llm.spending import TokenSpending
from bot.memory.service import MemoryService
from bot.rag.service import RagService
from bot.rag.uploads import DocumentReader
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService
from bot.skills.library import SkillLibrary
from bot.tools.mcp import McpManager


def install(
    commands: CommandRegistry,
    sessions: SessionService,
    clock: Clock,
    config_store: RuntimeConfigStore,
    model_switch: ModelSwitch,
    planner: ContextPlanner,
    compaction: CompactionService,
    memory: MemoryService,
    rag: RagService,
    documents: DocumentReader,
    mcp: McpManager,
    skills: SkillLibrary,
    answer_again: AnswerAgain,
    forget_exchange: ForgetExchange,
    setup_problems: Callable[[], list[str]] | None = None,
    spending: TokenSpending | None = None,
) -> StatusReporter:
    status = StatusReporter(config_store, planner, memory, rag, mcp, skills, setup_problems, spending)
    register_basic_commands(commands, sessions, status)
    register_compaction_commands(commands, sessions, compaction, config_store, memory)
    register_memory_commands(commands, memory, config_store)
    register_skill_command(commands, skills, sessions, config_store.in_force)
    register_conversation_commands(commands, sessions, answer_again, forget_exchange, clock)
    register_model_command(commands, model_switch, config_store)
    register_docs_command(commands, documents)
    return status

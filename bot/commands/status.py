"""`StatusReporter`: what `/status` and `python -m bot status` print for a session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bot.access.policy import is_owner_chat
from bot.context.planner import ContextPlanner
from bot.domain.session import AgentSession
from bot.llm.models import window_note
from bot.llm.spending import TokenSpending
from bot.memory.service import MemoryService, MemoryStatus
from bot.rag.service import RagService
from bot.runtime_config import RuntimeConfigStore
from bot.skills.library import SkillLibrary
from bot.skills.tools import active_skill
from bot.tools.mcp import McpManager


class StatusReporter:
    """Describes a session: messages, context against the budget, compactions, memory, model."""

    def __init__(
        self,
        config_store: RuntimeConfigStore,
        planner: ContextPlanner,
        memory: MemoryService,
        rag: RagService | None = None,
        mcp: McpManager | None = None,
        skills: SkillLibrary | None = None,
        setup_problems: Callable[[], list[str]] | None = None,
        spending: TokenSpending | None = None,
    ) -> None:
        """`setup_problems`: the failed checks of the setup that need no network, one line each (what
        `python -m bot doctor` says of them), shown to the owner."""
        self._setup_problems = setup_problems
        self._rag = rag
        self._spending = spending
        self._mcp = mcp
        self._skills = skills
        self._config_store = config_store
        self._planner = planner
        self._memory = memory

    async def report(self, session: AgentSession) -> str:
        config = await self._config_store.current()
        # The same plan `/context` shows: the last request's prompt parts and the conversation now.
        plan = self._planner.plan(session, config.llm.model, config)
        model = plan.budget.model
        memory = await self._memory.status(config.memory, session.id)
        pack = memory.last_pack
        pack_line = f"Memory pack (last message): {pack.diagnostics.describe()}" if pack else ""
        last_usage = session.metadata.last_usage
        last_prompt = (
            f", last call {last_usage['promptTokens']} prompt tokens ({last_usage.get('cachedTokens', 0)} cached)"
            if last_usage
            else ""
        )
        items = ", ".join(f"{layer.lower()} {count}" for layer, count in memory.items_per_layer.items())
        known = "" if model.known else " (not in models.json; default limits)"
        rag_line = (await self._rag.status()).describe() if self._rag is not None and config.rag.enabled else ""
        mcp_line = self._mcp_line() if config.mcp.enabled and config.mcp_servers else ""
        skills = await self._skills.skills() if self._skills is not None and config.skills.enabled else []
        skills_line = (
            f"Skills: {', '.join(skill.name for skill in skills)} (active: {active_skill(session) or 'none'})"
            if skills
            else ""
        )
        problems = await self._problems_for(session, config.access.allowed_users)
        return "\n".join(
            [
                f"Session {session.id} ({session.state.value})",
                f"Messages: {len(session.messages)}",
                f"Context: ~{plan.total_tokens} tokens of {plan.budget.trigger_tokens} ({plan.used_percent}%)"
                f"{'' if plan.prompt_measured else ', system prompt not measured yet'}{last_prompt}",
                f"Compactions: {session.metadata.compaction_count}",
                f"Memory: {_long_term_words(memory)}; items: {items}; "
                f"today's notes: {memory.today_note_lines} entries; scope {config.memory.scope}; "
                f"vectors {memory.vectors[0]}/{memory.vectors[1]} ({memory.embedder or 'lexical only'})"
                + (
                    f"; {memory.skipped_lines} unreadable item lines skipped (kept in their files)"
                    if memory.skipped_lines
                    else ""
                )
                + ("" if config.memory.enabled else " (memory disabled)"),
                *([pack_line] if pack_line else []),
                *([rag_line] if rag_line else []),
                *([mcp_line] if mcp_line else []),
                *([skills_line] if skills_line else []),
                *self._config_lines(),
                *([self._spending.describe()] if self._spending is not None else []),
                f"Model: {model.name}{known}, input {model.max_input_tokens} / output {model.max_output_tokens} tokens"
                + (f"; {window_note(model)}" if model.learned else ""),
                *problems,
            ]
        )

    async def _problems_for(self, session: AgentSession, allowed_users: list[int]) -> list[str]:
        """The setup's failed checks, for the owner's own chat (the terminal, or the owner's private chat)."""
        if self._setup_problems is None or not is_owner_chat(session.id, allowed_users):
            return []
        problems = await asyncio.to_thread(self._setup_problems)
        if not problems:
            return []
        count = f"{len(problems)} problem" + ("s" if len(problems) > 1 else "")
        return [f"Setup: {count} (python -m bot doctor checks everything):", *problems]

    def _config_lines(self) -> list[str]:
        """The keys of runtime-config.json refused now, one line each, until they are fixed."""
        problems = self._config_store.problems()
        if not problems:
            return []
        return [f"Config: {len(problems)} refused in {self._config_store.path}:"] + [
            f"  {problem.describe()}" for problem in problems
        ]

    def _mcp_line(self) -> str:
        """`MCP servers: files (stdio) ready, 6 tools (4 offered); web (http) failed: ... (2 restarts)`."""
        statuses = self._mcp.statuses() if self._mcp is not None else []
        if not statuses:
            return "MCP servers: none running (they start with the bot, or within seconds of a config edit)"
        described = []
        for status in statuses:
            text = f"{status.name} ({status.transport}) {status.state.value}"
            if status.tools:
                text += f", {status.tools} tools ({status.offered} offered)"
            if status.last_error and status.state.value != "ready":
                text += f": {status.last_error}"
            if status.restarts:
                text += f" ({status.restarts} restarts)"
            described.append(text)
        return "MCP servers: " + "; ".join(described)


def _long_term_words(memory: MemoryStatus) -> str:
    """MEMORY.md's size, and how much of it the last prompt held once it outgrew its share."""
    use = memory.long_term_use
    if use is None or use.whole or use.total_chars != memory.long_term_chars:
        return f"MEMORY.md {memory.long_term_chars} chars"
    return use.describe()

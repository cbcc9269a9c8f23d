"""ContextBuildingSystem (20): builds the system prompt the model is sent.

It is the one place the system prompt is assembled, in two system messages. The first holds what
stays the same from message to message: the persona from the workspace's `preferences/system-prompt.md`
(hand-editable; a built-in default when absent), `# Skills` (the skills in the workspace, names and
descriptions within `skills.promptBudgetChars`) and the active skill's instructions (read from
SKILL.md each time), and `# Memory` with MEMORY.md. The second, placed after the history just before
the newest user message (`PromptSection.made_each_turn`), holds what is made for this message: the current date
and time in the bot's time zone, `# Memory` with the structured pack or the daily notes, and
`# Relevant Memory` from the LightRAG knowledge graph (bounded in time, never failing the turn). So
each request starts with the whole of the one before, which providers cache. The active skill is
passed to memory retrieval, which favours the procedural items tagged with it.
The turn's `ContextPlan` is made here: memory and RAG are chosen within the shares it gives them,
every part is fitted to its share, and the plan is completed with what each part really takes.
It runs before MemoryPersist (50), so the model sees memory as it was before this exchange.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.clock import Clock
from bot.context.budget import MEMORY, RAG, SYSTEM
from bot.context.planner import ContextPlanner
from bot.domain.turn import PromptSection
from bot.memory.file_cache import TextFileCache
from bot.memory.prompt_building import left_for_graph
from bot.memory.service import MemoryPrompt, MemoryService
from bot.pipeline.system import PipelineSystem
from bot.pipeline.turn import TurnContext
from bot.pipeline.turn_storage import is_group_chat
from bot.rag.service import RagService
from bot.skills.library import SkillLibrary, render_catalog, render_instructions
from bot.skills.tools import active_skill
from bot.workspace import Workspace

log = logging.getLogger(__name__)

# The skills catalog takes at most this part of the system share: the persona and the active skill need the rest.
SKILLS_OF_SYSTEM_SHARE = 0.5
DEFAULT_PERSONA = (
    # Said of nobody in particular: the same persona opens the owner's chat, a group's and a guest's.
    "You are a helpful personal assistant in a chat. "
    "Answer concisely and in the language you are addressed in. "
    "You may use Markdown; it is converted for the chat app."
)


class ContextBuildingSystem(PipelineSystem):
    order = 20
    name = "Context"

    def __init__(
        self,
        workspace: Workspace,
        clock: Clock,
        planner: ContextPlanner,
        memory: MemoryService | None = None,
        rag: RagService | None = None,
        skills: SkillLibrary | None = None,
    ) -> None:
        self._workspace = workspace
        self._clock = clock
        self._memory = memory
        self._rag = rag
        self._planner = planner
        self._skills = skills
        # The persona file is read for every message and rarely changes: re-read only when it did.
        self._persona = TextFileCache()

    async def process(self, ctx: TurnContext) -> None:
        persona = await self._persona.read(self._workspace.system_prompt_file)
        ctx.system_prompt_parts[PromptSection.PERSONA] = (persona or "").strip() or DEFAULT_PERSONA
        now = self._clock.now()
        ctx.system_prompt_parts[PromptSection.TIME] = (
            f"Current date and time: {now.strftime('%A, %Y-%m-%d %H:%M')} ({now.tzname()})."
        )
        people = _people_line(ctx)
        if people:  # the same for every message of the chat: with the persona, not with the time
            ctx.system_prompt_parts[PromptSection.PEOPLE] = people
        # The turn's plan: the conversation as compaction (18) left it, and each part's share (the one 18
        # checked, when it compacted nothing).
        plan = ctx.plan or self._planner.plan(ctx.session, ctx.model, ctx.config)
        skill = await self._skills_part(ctx, plan.given(SYSTEM))
        memory = await self._memory_part(ctx, skill, plan.given(MEMORY))
        if memory is not None and memory.stable:
            ctx.system_prompt_parts[PromptSection.LONG_TERM] = memory.stable
        if memory is not None:
            ctx.memory_pack = memory.pack
        if memory is not None and memory.turn:
            section = PromptSection.MEMORY_PACK if memory.shows_pack else PromptSection.DAILY_NOTES
            ctx.system_prompt_parts[section] = memory.turn

        # What the prompt shows anyway (the memory section and the live conversation) is not repeated.
        def shown() -> str:
            memory_text = memory.text if memory is not None else ""
            return "\n".join([memory_text, *(message.content for message in ctx.session.messages)])

        # One budget for all that is recalled: the graph gets what the memory section left of it.
        rag_share = plan.given(RAG)
        if self._memory is not None and ctx.config.memory.enabled:
            rag_share = min(rag_share, left_for_graph(ctx.config.memory, memory, self._planner.estimator, ctx.model))
        relevant = await self._rag_part(ctx, shown, rag_share)
        if relevant:
            ctx.system_prompt_parts[PromptSection.RELEVANT_MEMORY] = relevant
        # Each part within its share; an overflowing one is cut with a visible marker, so it never
        # silently pushes the conversation out of the model's window. The completed plan is the turn's.
        ctx.system_prompt_parts, ctx.plan = self._planner.fit_prompt(
            ctx.session, plan, ctx.system_prompt_parts, ctx.model
        )
        plan = ctx.plan
        log.debug(
            "[Context] System prompt: %d chars, then %d chars for this message; ~%d of %d tokens in all",
            len(ctx.system_prompt),
            len(ctx.turn_prompt),
            plan.total_tokens,
            plan.budget.trigger_tokens,
        )

    async def rebuild(self, ctx: TurnContext) -> None:
        """Build the turn's prompt parts again, for the plan as it stands now (a smaller window was learned)."""
        ctx.system_prompt_parts = {}
        ctx.plan = None
        await self.process(ctx)

    async def _skills_part(self, ctx: TurnContext, system_share: int) -> str | None:
        """Adds `# Skills` and the active skill's instructions; returns the active skill's name. The catalog
        takes at most `SKILLS_OF_SYSTEM_SHARE` of the system share (`system_share` tokens), so a model with a
        small window gets fewer skills listed rather than a catalog cut off."""
        config = ctx.config.skills
        if self._skills is None or not config.enabled:
            return None
        try:
            skills = await self._skills.skills()
        except OSError as error:
            log.warning("[Context] Skills could not be read: %s", error)
            return None
        share_chars = int(system_share * SKILLS_OF_SYSTEM_SHARE * self._planner.estimator.ratio_for(ctx.model))
        catalog = render_catalog(skills, min(config.prompt_budget_chars, share_chars), config.max_description_chars)
        if catalog:
            ctx.system_prompt_parts[PromptSection.SKILLS] = catalog
        name = active_skill(ctx.session)
        skill = next((skill for skill in skills if name is not None and skill.name.lower() == name.lower()), None)
        if skill is None:
            return None  # switched off, or its folder is gone: nothing to follow, nothing to favour
        ctx.system_prompt_parts[PromptSection.SKILL] = render_instructions(skill, config.max_instructions_chars)
        return skill.name

    async def _memory_part(self, ctx: TurnContext, skill: str | None, share: int) -> MemoryPrompt | None:
        """`# Memory`, chosen against the share the turn's plan gives it, so nothing chosen is cut afterwards."""
        if self._memory is None or not ctx.config.memory.enabled:
            return None
        try:
            prompt = await self._memory.build_prompt(
                ctx.config.memory,
                ctx.session.id,
                ctx.user_message.content,
                live=ctx.session.messages,
                share_tokens=share,
                model=ctx.model,
                active_skill=skill,
            )
        except Exception:
            # Memory is worth a lot, but never the answer itself.
            log.exception("[Context] Memory could not be read; answering without it")
            return None
        log.info("[Context] Memory context: %d chars", len(prompt.text))
        return prompt

    async def _rag_part(self, ctx: TurnContext, shown: Callable[[], str], share: int) -> str:
        """`# Relevant Memory`, within the share the turn's plan gives it."""
        if self._rag is None or not ctx.config.rag.enabled:
            return ""
        try:
            retrieved = await self._rag.retrieve(
                ctx.config, ctx.session.id, ctx.user_message.content, shown, share_tokens=share
            )
        except Exception:
            log.exception("[RAG] Relevant Memory could not be read; answering without it")
            return ""
        return retrieved.text


GROUP_CHAT_LINE = (
    "This is a group chat: each user message starts with its sender's name. "
    '"I", "me" and "my" in a message mean its sender, not the others.'
)


def _people_line(ctx: TurnContext) -> str:
    """Who the model talks with: in a group, how messages are named; in a private chat, the person (once)."""
    if is_group_chat(ctx):
        return GROUP_CHAT_LINE
    sender = ctx.user_message.sender
    return f"You are talking with {sender.name} (user id {sender.id})." if sender is not None else ""

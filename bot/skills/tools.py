"""The skill a chat has switched on: the `load_skill` tool and the session key (`/skill` is in `bot.commands.skills`).

The active skill is kept in the session's metadata (`activeSkill`), so it outlives a restart. While
it is active its instructions are in the system prompt (re-read from SKILL.md every message) and
memory retrieval favours the procedural items tagged with its name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

from bot.domain.session import AgentSession
from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig
from bot.skills.library import Skill, SkillLibrary, render_instructions
from bot.tools.registry import AnyTool, Tool, ToolContext, ToolError

log = logging.getLogger(__name__)


def active_skill(session: AgentSession) -> str | None:
    return session.metadata.active_skill or None


class LoadSkillArgs(BaseModel):
    name: str = Field(min_length=1, max_length=64, description="The skill's name, as listed under # Skills")


def skill_names(skills: Sequence[Skill]) -> str:
    return ", ".join(skill.name for skill in skills) or "none"


class SkillTools:
    """Offers `load_skill` while skills are on and at least one exists."""

    def __init__(self, library: SkillLibrary, sessions: SessionService, config: Callable[[], RuntimeConfig]) -> None:
        self._library = library
        self._sessions = sessions
        self._config = config
        self._tool = Tool(
            "load_skill",
            "Switch on a skill from the # Skills list for this conversation and get its instructions.",
            LoadSkillArgs,
            self._load,
        )

    def tools(self) -> Sequence[AnyTool]:
        if not self._config().skills.enabled or not self._library.known:
            return []
        return [self._tool]

    async def _load(self, args: LoadSkillArgs, context: ToolContext) -> str:
        skill = await self._library.get(args.name)
        if skill is None:
            known = skill_names(await self._library.skills())
            raise ToolError(f"there is no skill named {args.name!r}. Skills: {known}.")
        session = await self._sessions.get(context.session_id)
        if session is not None:
            # The running turn holds this session and saves it with its next message.
            session.metadata.active_skill = skill.name
        log.info("[Skills] turn %s: %s switched on %s", context.turn_id, context.session_id, skill.name)
        instructions = render_instructions(skill, context.config.skills.max_instructions_chars)
        return f"Skill {skill.name} is now active for this conversation.\n\n{instructions}"

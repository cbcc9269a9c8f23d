"""`/skill`: list the skills in the workspace, or switch one on (`/skill NAME`) or off (`/skill off`)
for this conversation; the choice is kept in the session (`activeSkill`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig
from bot.skills.library import SkillLibrary
from bot.skills.tools import active_skill, skill_names

log = logging.getLogger(__name__)


def register_skill_command(
    registry: CommandRegistry, library: SkillLibrary, sessions: SessionService, config: Callable[[], RuntimeConfig]
) -> None:
    async def skill_command(request: CommandRequest) -> str:
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        skills = await library.skills()
        wanted = request.args.strip()
        if not config().skills.enabled:
            return "Skills are off (skills.enabled in runtime-config.json)."
        if not wanted:
            current = active_skill(session)
            listing = "\n".join(f"- {skill.name}: {skill.description}" for skill in skills)
            return (
                f"Active skill: {current or 'none'}.\n"
                + (f"Skills in skills/:\n{listing}" if skills else "No skills yet: add skills/NAME/SKILL.md.")
                + "\nUse /skill NAME to switch one on, /skill off to switch it off."
            )
        async with sessions.lock_for(session.id):
            if wanted.lower() in ("off", "none"):
                session.metadata.active_skill = None
                await sessions.save(session)
                return "No skill is active now."
            skill = await library.get(wanted)
            if skill is None:
                return f"There is no skill named {wanted!r}. Skills: {skill_names(skills)}."
            session.metadata.active_skill = skill.name
            await sessions.save(session)
        log.info("[Skills] %s switched on %s", session.id, skill.name)
        return f"Skill {skill.name} is active: {skill.description}"

    registry.register(
        Command("skill", "list skills, or switch one on (/skill NAME, /skill off)", skill_command, "[name|off]")
    )

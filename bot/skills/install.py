"""What the skills package gives the rest of the bot: the skill library, with `load_skill` and `/skill`."""

from __future__ import annotations

from collections.abc import Callable

from bot.commands.registry import CommandRegistry
from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig
from bot.skills.library import SkillLibrary
from bot.skills.tools import SkillTools
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace


def install(
    workspace: Workspace,
    sessions: SessionService,
    config: Callable[[], RuntimeConfig],
    tools: ToolRegistry,
    commands: CommandRegistry,
) -> SkillLibrary:
    library = SkillLibrary(workspace.skills_dir)
    skill_tools = SkillTools(library, sessions, config)
    tools.add_source(skill_tools)
    skill_tools.register_command(commands)
    return library

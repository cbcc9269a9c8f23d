"""What the skills package gives the rest of the bot: the skill library, and `SkillTools` (the
`load_skill` tool, registered here; the `/skill` command is the commands package's, `bot.commands.skills`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.sessions.service import SessionService
from bot.settings import RuntimeConfig
from bot.skills.library import SkillLibrary
from bot.skills.tools import SkillTools
from bot.tools.registry import ToolRegistry
from bot.workspace import Workspace


@dataclass(frozen=True)
class InstalledSkills:
    """The skills in the workspace, and the tool that switches one on for a conversation."""

    library: SkillLibrary
    tools: SkillTools


def install(
    workspace: Workspace, sessions: SessionService, config: Callable[[], RuntimeConfig], tools: ToolRegistry
) -> InstalledSkills:
    library = SkillLibrary(workspace.skills_dir)
    skill_tools = SkillTools(library, sessions, config)
    tools.add_source(skill_tools)
    return InstalledSkills(library, skill_tools)

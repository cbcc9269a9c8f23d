"""`prepare_workspace`: the workspace a command works in, completed from `workspace_template/` first."""

from __future__ import annotations

import json
import logging

from bot.environment import InvalidEnvironment, workspace_line
from bot.runtime_config import SCHEMA_KEY
from bot.settings import EnvSettings
from bot.settings_docs import shipped_schema_path
from bot.shipped import shipped_path
from bot.storage.files import remove_stale_temp_files, write_atomic_sync
from bot.workspace import Workspace

log = logging.getLogger(__name__)


def prepare_workspace(env: EnvSettings) -> Workspace:
    """The workspace, with whatever was missing filled in from `workspace_template/`; `InvalidEnvironment`
    (naming `BOT_WORKSPACE`) when it cannot be made."""
    workspace = Workspace(env.bot_workspace)
    try:
        created = workspace.complete_from(shipped_path("workspace_template"))
        if workspace.runtime_config_file in created:
            # A new file names the schema, so an editor completes and checks its keys.
            schema = {SCHEMA_KEY: shipped_schema_path().as_uri()}
            write_atomic_sync(workspace.runtime_config_file, (json.dumps(schema, indent=2) + "\n").encode())
    except OSError as error:
        raise InvalidEnvironment([workspace_line(env.bot_workspace, str(error))]) from error
    removed = remove_stale_temp_files(workspace.root)
    if removed:
        log.info("[Workspace] Removed %d temp files left by an interrupted write", removed)
    return workspace

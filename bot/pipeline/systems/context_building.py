"""ContextBuildingSystem (20): builds the system prompt the model is sent.

It is the one place the system prompt is assembled: the persona from the workspace's
`preferences/system-prompt.md` (hand-editable; a built-in default when absent) and the current date
and time in the bot's time zone. Memory sections plug in here as parts of their own.
"""

from __future__ import annotations

import logging

from bot.clock import Clock
from bot.domain.turn import TurnContext
from bot.pipeline.system import PipelineSystem
from bot.storage.files import read_text
from bot.workspace import Workspace

log = logging.getLogger(__name__)

DEFAULT_PERSONA = (
    "You are a helpful personal assistant talking with your owner in a chat. "
    "Answer concisely and in the language you are addressed in. "
    "You may use Markdown; it is converted for the chat app."
)


class ContextBuildingSystem(PipelineSystem):
    order = 20
    name = "Context"

    def __init__(self, workspace: Workspace, clock: Clock) -> None:
        self._workspace = workspace
        self._clock = clock

    async def process(self, ctx: TurnContext) -> None:
        persona = await read_text(self._workspace.system_prompt_file)
        ctx.system_prompt_parts["base"] = (persona or "").strip() or DEFAULT_PERSONA
        now = self._clock.now()
        ctx.system_prompt_parts["time"] = (
            f"Current date and time: {now.strftime('%A, %Y-%m-%d %H:%M')} ({now.tzname()})."
        )
        log.debug("[Context] System prompt: %d chars", len(ctx.system_prompt))

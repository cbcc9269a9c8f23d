"""`PipelineSystem`: one numbered step of the pipeline."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from bot.pipeline.turn import TurnContext


class PipelineSystem(ABC):
    """A step with a fixed `order`. Steps that run `after_reply` can never delay or lose the reply:
    the runner delivers the reply first and only logs their failures."""

    order: ClassVar[int]
    name: ClassVar[str]
    after_reply: ClassVar[bool] = False

    def enabled(self, ctx: TurnContext) -> bool:
        """Whether to run for this turn (usually a runtime-config switch)."""
        return True

    @abstractmethod
    async def process(self, ctx: TurnContext) -> None:
        """Do this system's part of the turn, reading and adding to `ctx`."""


class UserFacingError(Exception):
    """A failure inside the pipeline that ends the turn with `user_message` as the reply."""

    def __init__(self, user_message: str) -> None:
        super().__init__(user_message)
        self.user_message = user_message

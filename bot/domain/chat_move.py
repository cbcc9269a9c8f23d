"""`ChatMove`: a chat that its channel now knows under another id.

On Telegram a basic group becomes a supergroup (when the bot is made an admin, when the history is
made visible to new members, at 200 members ...) under a new chat id; the group's messages come from
the new id from then on, and the old one refuses every call. What the bot keeps under the old id
belongs under the new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain.session import session_id_for


@dataclass(frozen=True, slots=True)
class ChatMove:
    """The chat `old_chat_id` of `channel_type` lives on as `new_chat_id`."""

    channel_type: str
    old_chat_id: str
    new_chat_id: str

    @property
    def old_session_id(self) -> str:
        return session_id_for(self.channel_type, self.old_chat_id)

    @property
    def new_session_id(self) -> str:
        return session_id_for(self.channel_type, self.new_chat_id)

    def __str__(self) -> str:
        return f"{self.old_session_id} → {self.new_session_id}"
